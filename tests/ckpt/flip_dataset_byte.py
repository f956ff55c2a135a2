"""Flips one byte in the middle of a dataset's stored values in an HDF5 file.

    flip_dataset_byte.py FILE [DATASET]

DATASET defaults to the first (by name) master dataset of more than one
value. Prints what it flipped. Used by the checkpoint corruption tests.
"""
import sys

import h5py

path = sys.argv[1]
with h5py.File(path, "r") as f:
    if len(sys.argv) > 2:
        name = sys.argv[2]
    else:
        names = []
        f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) and o.size > 1 else None)
        name = sorted(n for n in names if "|master|" in n)[0]
    offset, nbytes = f[name].id.get_offset(), f[name].id.get_storage_size()
at = offset + nbytes // 2
with open(path, "r+b") as fh:
    fh.seek(at)
    byte = fh.read(1)[0]
    fh.seek(at)
    fh.write(bytes([byte ^ 0x5A]))
print(f"# flipped the byte at {at} (dataset '{name}', bytes [{offset}, {offset + nbytes})) of {path}")
