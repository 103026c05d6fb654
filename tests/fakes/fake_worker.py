"""A stand-in GPU worker for testing tmakit.check.isolate on a CPU: it answers per the tile shape.

tile (1, 16): hangs; tile (2, 16): dies after a fatal error; anything else: ok."""

import json
import sys
import time

print("ready", flush=True)
for line in sys.stdin:
    tile = tuple(json.loads(line)["tile"])
    if tile == (1, 16):
        time.sleep(60)
    if tile == (2, 16):
        print(json.dumps({"status": "error", "detail": "CUDA error: illegal", "fatal": True}), flush=True)
        sys.exit(1)
    print(json.dumps({"status": "ok"}), flush=True)
