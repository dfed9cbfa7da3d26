from .dflash import DFlashDraftModel
from .utils import  extract_context_feature, sample, load_and_process_dataset