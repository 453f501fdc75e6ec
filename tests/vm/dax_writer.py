"""A file written through DAX in 1 MiB chunks of known content, for the vm
tests that change a volume while it is in use (expansion, snapshots)."""
import hashlib
import os
import threading

MiB = 1 << 20


def chunk(i):
    """1 MiB of content that depends on its index."""
    return hashlib.sha256(b"%d" % i).digest() * (MiB // 32)


class Writer(threading.Thread):
    """Writes 1 MiB chunks to |path| (on the DAX mount) with fsync, going
    round the first |limit| MiB again and again until stopped (or once, with
    |once|); chunk i always holds chunk(i)."""

    def __init__(self, path, limit, once=False):
        super().__init__(daemon=True)
        self.path, self.limit, self.once = path, limit, once
        self.n, self.stop, self.error = 0, False, None

    def run(self):
        try:
            with open(self.path, "wb") as f:
                while not self.stop and not (self.once and self.n >= self.limit):
                    i = self.n % self.limit
                    f.seek(i * MiB)
                    f.write(chunk(i))
                    f.flush()
                    os.fsync(f.fileno())
                    self.n += 1
        except OSError as e:
            self.error = e

    def verify(self):
        with open(self.path, "rb") as f:
            for i in range(min(self.n, self.limit)):
                if f.read(MiB) != chunk(i):
                    return "chunk %d differs" % i
        return None
