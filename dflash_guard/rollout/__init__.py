"""Rollout checks against live engines: acceptance monitoring (`monitor`) and concurrency-tier
benchmarks (`bench`)."""
