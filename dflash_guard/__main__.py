"""Allow `python -m dflash_guard`."""

from dflash_guard._cli import main

main()
