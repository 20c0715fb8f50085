"""The EC2 backend end to end against moto's EC2 and SSM emulation (boto3's own request layer,
botocore's models and validation): a probe, its records, its teardown, and the cleanup of
instances a killed probe left."""

from __future__ import annotations

import importlib
import json
import os

import pytest

# in CI the test extras install them: a missing one fails there instead of skipping
_need = importlib.import_module if os.environ.get("CI") else pytest.importorskip
moto, boto3 = _need("moto"), _need("boto3")


@pytest.fixture
def aws(monkeypatch):
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_DEFAULT_REGION": "us-east-1", "SIMROLLOUT_EC2_PROFILE": "probe-ssm"}.items():  # fmt: skip
        monkeypatch.setenv(k, v)
    monkeypatch.setattr("simrollout.calibration.backends.ec2.POLL", 0.01)
    with moto.mock_aws():
        boto3.client("iam").create_instance_profile(InstanceProfileName="probe-ssm")
        ami = boto3.client("ec2").describe_images()["Images"][0]["ImageId"]
        yield ami


def _live(ec2):
    r = ec2.describe_instances(Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}])
    return [i for res in r["Reservations"] for i in res["Instances"]]


@pytest.mark.slow
def test_probe_on_ec2_records_every_phase_and_leaves_nothing(aws, tmp_path):
    from simrollout.calibration.backends import get_backend
    from simrollout.calibration.probe import ProbePlan, probe

    be = get_backend("ec2")
    out = tmp_path / "ec2.jsonl"
    probe(be, ProbePlan(sandboxes=3, commands=2, levels=(1, 2), image=aws), out)
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    phases = {r["phase"] for r in recs}
    assert phases == {"create", "exec", "teardown"}  # no file transfer on EC2
    assert all(r["ok"] for r in recs) and all(r["image"] == aws for r in recs)
    assert sum(r["phase"] == "create" for r in recs) == 6 and sum(r["phase"] == "exec" for r in recs) == 12
    assert recs[0]["backend_version"] == boto3.__version__
    ec2 = boto3.client("ec2")
    assert _live(ec2) == []  # every instance terminated, and waited for
    # each instance was launched with the project's tags and the server-side time limit
    every = [i for res in ec2.describe_instances()["Reservations"] for i in res["Instances"]]
    assert len(every) == 6
    for i in every:
        tags = {t["Key"] for t in i["Tags"]}
        assert {"simrollout-probe", "simrollout-created", "simrollout-owner"} <= tags
        attr = ec2.describe_instance_attribute(
            InstanceId=i["InstanceId"], Attribute="instanceInitiatedShutdownBehavior"
        )
        assert attr["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"


@pytest.mark.slow
def test_instances_of_a_killed_probe_are_cleaned_up(aws):
    from simrollout.calibration.backends import get_backend
    from simrollout.calibration.cleanup import sweep_stale

    be = get_backend("ec2")
    ec2 = boto3.client("ec2")
    dead = be.create(aws, "run-killed")
    mine = be.create(aws, "run-alive")
    # the first looks like a probe that died: its owner is a process of this host that is gone
    ec2.create_tags(Resources=[dead], Tags=[{"Key": "simrollout-owner", "Value": f"{_host()}:999999"}])
    found, stale = sweep_stale(be)
    assert {s.id for s in found} == {dead, mine}
    assert [s.id for s in stale] == [dead] and stale[0].run == "run-killed"
    assert {i["InstanceId"] for i in _live(ec2)} == {mine}
    be.remove(mine)
    assert _live(ec2) == []


@pytest.mark.slow
def test_a_local_image_tag_is_refused_on_ec2(aws):
    from simrollout.calibration.backends import BackendUnavailable, get_backend

    with pytest.raises(BackendUnavailable, match="AMI id"):
        get_backend("ec2").create("simrollout-busybox:local", "x")
    assert _live(boto3.client("ec2")) == []


def _host() -> str:
    import socket

    return socket.gethostname()
