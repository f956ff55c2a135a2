#!/usr/bin/env python3
"""Prints every piece of a committed checkpoint with its checksum, sorted:
two checkpoints hold the same bits when their listings are equal. A missing
or empty checkpoint prints a line naming it (so it never equals another's
listing) and exits 1.
  checkpoint_checksums.py STEP_DIR"""
import json
import sys

path = f"{sys.argv[1]}/manifest.json"
try:
    pieces = json.load(open(path))["pieces"]
except (OSError, ValueError, KeyError) as e:
    pieces = []
    print(f"unreadable {path}: {e}")
if not pieces:
    print(f"no pieces in {path}")
    sys.exit(1)
for piece in sorted(pieces, key=lambda p: p["dataset"]):
    print(piece["dataset"], piece["checksum"])
