"""Does it import code: `remote_code` (a `.py` file or `auto_map` target, parsed with `ast`,
never imported; its walk in `visitor`, `names` and `paths`, its tables in `catalog` and the
capability catalogue in `capabilities`), `channels` (the config keys that make a loader import
code) and `tokenizer_regex` (a `tokenizer.json` run by the real `tokenizers` in a bounded
child: its regexes, and whether it gives ordinary text back)."""
