"""Pins: what exactly is deployed. The lockfile model, building a lock from the Hub, the HF cache or
folders, hashing, and verifying disk against a lock."""
