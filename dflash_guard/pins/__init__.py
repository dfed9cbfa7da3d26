"""Pins: what exactly is deployed. The lockfile model, building a lock from the Hub, the HF cache or
folders, hashing, verifying disk against a lock, and the files an engine opens from a verified
folder (`fileset`)."""
