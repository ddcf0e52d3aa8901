"""The remote repository against an "older" S3 store: a single-node Ceph RGW 16 (Debian 12's ``radosgw``) on
127.0.0.1, started by ``tests/ceph-rgw-single-node.sh`` (about 16 s). It ignores ``If-None-Match`` on
CompleteMultipartUpload and mishandles quoted ``If-Match``; trtwarm relies on neither (blobs are content-addressed,
so an unconditional multipart upload is safe; refs are one small PUT with ``If-None-Match: *``, which RGW 16
honours, and :meth:`Repository.conditional_writes` probes for it). The same tests as against SeaweedFS: the pull of
a second cluster, the race of eight pushers, a corrupt blob, and gc. Skipped, with the reason, where Ceph is not
installed or not root.
"""

from __future__ import annotations

from typing import Any

import pytest
import test_remote as seaweed
from rgwserver import RgwServer, missing

# the same tests as against SeaweedFS, collected here so they use this module's s3 fixture
url = seaweed.url
test_a_second_cluster_pulls_what_the_first_built_and_a_wiped_volume_pulls_again = \
    seaweed.test_a_second_cluster_pulls_what_the_first_built_and_a_wiped_volume_pulls_again
test_eight_concurrent_pushers_of_one_key_leave_one_ref_and_every_volume_runs_its_engine = \
    seaweed.test_eight_concurrent_pushers_of_one_key_leave_one_ref_and_every_volume_runs_its_engine
test_a_corrupt_blob_is_refused_reported_and_rebuilt_and_the_push_repairs_it = \
    seaweed.test_a_corrupt_blob_is_refused_reported_and_rebuilt_and_the_push_repairs_it
test_remote_gc_never_removes_a_blob_a_ref_points_to = seaweed.test_remote_gc_never_removes_a_blob_a_ref_points_to
test_a_store_without_create_only_puts_gets_the_read_back_fallback_first_ref_kept_and_said = \
    seaweed.test_a_store_without_create_only_puts_gets_the_read_back_fallback_first_ref_kept_and_said
pytestmark = [pytest.mark.rgw, pytest.mark.skipif(missing() is not None, reason=str(missing()))]


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One single-node Ceph for the module; every daemon stopped by its pid at the end."""
    server = RgwServer(tmp_path_factory.mktemp("rgw") / "ceph").start()
    try:
        yield server
    finally:
        server.stop()


def test_rgw_honours_create_only_puts_so_refs_take_the_conditional_path(s3: RgwServer) -> None:
    """What makes the protocol safe here, checked on the live server: the probe finds ``If-None-Match: *`` honoured
    on PUT (so no fallback is taken), and a second create of the same ref loses."""
    from trtwarm.remote.client import Client
    from trtwarm.remote.repo import Repository
    from trtwarm.remote.url import parse

    repo = Repository(Client(parse("s3://engines/probe-check", s3.env())))
    assert repo.conditional_writes()
    assert repo.client.put_create("refs/x.json", b"first") is True
    assert repo.client.put_create("refs/x.json", b"second") is False
    assert repo.client.get("refs/x.json", 100) == b"first"
