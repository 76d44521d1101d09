"""One torch intra-op thread: on a shared 2-core machine the tiny matmuls of these tests run many times faster
single-threaded (two OpenMP threads spend their time in barriers)."""

import torch

torch.set_num_threads(1)
