"""Shared test setup. The models in these tests are tiny: one thread runs them fastest
and keeps the suite steady on a shared 2-core machine."""
import torch

torch.set_num_threads(1)
