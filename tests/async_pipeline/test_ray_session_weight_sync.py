"""WeightSync: weights cross in their own dtype (bf16 stays bf16), bit for bit, in buckets of bounded size; through
Ray's object store the handle carries references only and the buckets arrive zero-copy."""

from __future__ import annotations

import os
import shutil

import pytest
import torch
from async_pipeline.ray_session.weight_sync import RayWeightSync
from hypothesis import given, settings
from hypothesis import strategies as st
from trainers.weight_sync import LocalWeightSync, WeightBucket, pack, unpack


def _weights(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "model.embed_tokens.weight": torch.randn(24, 8, generator=g).to(torch.bfloat16),
        "model.layers.0.mlp.gate.weight": torch.randn(4, 8, generator=g),
        "model.norm.weight": torch.randn(8, generator=g).to(torch.float16),
        "scalar": torch.tensor(3.5, dtype=torch.float64),
    }


def test_local_sync_gives_back_every_tensor_bit_for_bit_in_its_own_dtype() -> None:
    weights = _weights()
    sync = LocalWeightSync()
    handle = sync.publish(weights, 7)
    got = sync.fetch(handle)
    assert handle.version == 7 and got.keys() == weights.keys()
    for name, value in weights.items():
        assert got[name].dtype == value.dtype and got[name].shape == value.shape
        assert torch.equal(got[name], value), name


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 300), min_size=1, max_size=12), st.integers(1, 2000))
def test_buckets_hold_each_tensor_once_within_the_size_limit(sizes: list[int], limit: int) -> None:
    weights = {f"w{i:02d}": torch.arange(n, dtype=torch.float32) + i for i, n in enumerate(sizes)}
    buckets = pack(weights, limit)
    names = [s.name for b in buckets for s in b.slots]
    assert names == sorted(weights)
    for b in buckets:
        assert b.data.dtype.name == "uint8" and b.data.ndim == 1
        assert len(b.slots) == 1 or b.data.nbytes <= limit  # an oversized tensor gets a bucket of its own
    got = {k: v for b in buckets for k, v in unpack(b).items()}
    assert all(torch.equal(got[k], v) for k, v in weights.items())


def test_a_read_only_bucket_from_the_object_store_still_unpacks() -> None:
    (bucket,) = pack(_weights())
    frozen = bucket.data.copy()
    frozen.flags.writeable = False
    got = unpack(WeightBucket(bucket.slots, frozen))
    assert torch.equal(got["model.embed_tokens.weight"], _weights()["model.embed_tokens.weight"])


def test_packing_into_scratch_reuses_its_buffers_and_gives_the_new_weights() -> None:
    scratch: list = []
    first = pack(_weights(0), 64, scratch)
    buffers = [b.ctypes.data for b in scratch]
    assert len(scratch) == len(first) > 1
    second = pack(_weights(1), 64, scratch)
    assert [b.ctypes.data for b in scratch] == buffers  # the same memory, no new allocation
    got = {k: v for b in second for k, v in unpack(b).items()}
    assert all(torch.equal(got[k], v) for k, v in _weights(1).items())
    grown = pack({"big": torch.arange(100, dtype=torch.float64)}, 64, scratch)
    assert scratch[0].nbytes >= 800 and torch.equal(unpack(grown[0])["big"], torch.arange(100, dtype=torch.float64))


def test_a_bad_bucket_size_is_refused() -> None:
    with pytest.raises(ValueError, match="bucket_bytes >= 1"):
        pack(_weights(), 0)


@pytest.mark.slow
def test_ray_sync_moves_references_and_delivers_the_same_weights(tmp_path) -> None:
    import ray

    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    ray.init(
        num_cpus=1,
        include_dashboard=False,
        _temp_dir=f"/tmp/ws_{os.getpid()}",
        configure_logging=False,
        log_to_driver=False,
    )
    try:
        sync = RayWeightSync(bucket_bytes=256)
        weights = _weights()
        handle = sync.publish(weights, 3)
        assert len(handle.buckets) >= 2 and all(isinstance(b, ray.ObjectRef) for b in handle.buckets)

        @ray.remote
        def fetch_remotely(h):  # another process reads the buckets where it runs
            got = RayWeightSync().fetch(h)
            return {k: (str(v.dtype), v.float().sum().item()) for k, v in got.items()}

        remote = ray.get(fetch_remotely.remote(handle))
        assert remote == {k: (str(v.dtype), v.float().sum().item()) for k, v in weights.items()}
    finally:
        ray.shutdown()
        shutil.rmtree(f"/tmp/ws_{os.getpid()}", ignore_errors=True)
