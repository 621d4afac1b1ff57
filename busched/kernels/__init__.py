"""The private array fast path.  Every kernel names the plain code it replaces, and
tests check both give the same answers on random clusters.

``USE_KERNELS`` turns the fast path off (the reference loops run instead); it
starts from the ``BUSCHED_KERNELS`` environment variable ("0" turns it off) so
a benchmark can be run both ways.
"""

import os

USE_KERNELS: bool = os.environ.get("BUSCHED_KERNELS", "1") != "0"
