import pytest
import torch

from tests.helpers import tiny

torch.set_num_threads(1)  # tiny models: threads only add overhead and noise


@pytest.fixture
def tiny_cfg():
    return tiny()
