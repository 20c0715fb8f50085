"""Cloud VMs on EC2 through boto3: RunInstances -> running -> first SSM command -> terminate.

Needs AWS credentials, an AMI with the SSM agent (``image``: an ``ami-`` id), and an instance
profile allowing SSM (``SIMROLLOUT_EC2_PROFILE``). Phases follow docs/calibration.md: create is
from RunInstances until the instance answers its first command (polled every ``POLL`` s, not the
15 s of boto3's waiter); teardown is until the instance is ``terminated``. Every instance carries
the project's tags (run, creation time, owner) and shuts itself down, terminating, after
:data:`~simrollout.calibration.cleanup.TTL` (instance-initiated shutdown), so a probe that never
comes back stops paying within that limit.
"""

from __future__ import annotations

import os
import time

from ..cleanup import TTL, Owned, owner
from . import BackendUnavailable, CommandFailed, require

TAG = "simrollout-probe"  # value: the probe run
CREATED, OWNER = "simrollout-created", "simrollout-owner"
POLL = 0.5  # s between state polls
GONE = ("terminated",)


class EC2Backend:
    name = "ec2"
    default_image = ""  # AMI ids are per region: --image is required
    supports_files = False

    def __init__(self, instance_type: str = "c5.large"):
        boto3 = require("boto3", "ec2", "ec2")
        session = boto3.session.Session()
        if session.get_credentials() is None:
            raise BackendUnavailable(
                "the ec2 backend needs AWS credentials: set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE), and AWS_DEFAULT_REGION."
            )
        if not os.environ.get("SIMROLLOUT_EC2_PROFILE"):
            raise BackendUnavailable(
                "the ec2 backend needs an instance profile that allows SSM: set SIMROLLOUT_EC2_PROFILE."
            )
        from botocore.exceptions import ClientError

        self.boto3, self.type, self._error = boto3, instance_type, ClientError
        self.ec2, self.ssm = session.client("ec2"), session.client("ssm")

    def info(self):
        return {"backend_version": self.boto3.__version__, "engine_version": self.type}

    def prepare(self, image: str) -> None:
        """Refuse anything but an AMI id before a probe starts."""
        if not str(image).startswith("ami-"):
            raise BackendUnavailable(
                f"the ec2 backend needs an AMI id with the SSM agent as --image (ami-...), got "
                f"'{image}' (AMI ids are per region; a local Docker image tag cannot boot a VM)."
            )

    def create(self, image, label):
        self.prepare(image)
        r = self.ec2.run_instances(
            ImageId=image,
            InstanceType=self.type,
            MinCount=1,
            MaxCount=1,
            IamInstanceProfile={"Name": os.environ["SIMROLLOUT_EC2_PROFILE"]},
            # the server-side limit: the instance powers itself off after TTL, and is terminated
            InstanceInitiatedShutdownBehavior="terminate",
            UserData=f"#!/bin/sh\nshutdown -h +{int(TTL // 60)}\n",
            TagSpecifications=[
                {
                    "ResourceType": "instance",
                    "Tags": [
                        {"Key": TAG, "Value": label},
                        {"Key": CREATED, "Value": f"{time.time():.3f}"},
                        {"Key": OWNER, "Value": owner()},
                    ],
                }
            ],
        )
        iid = r["Instances"][0]["InstanceId"]
        try:
            self._until_state(iid, ("running",))
            self._first_command(iid)
        except BaseException:
            self.remove(iid)
            raise
        return iid

    def _state(self, iid: str) -> str:
        r = self.ec2.describe_instances(InstanceIds=[iid])
        return r["Reservations"][0]["Instances"][0]["State"]["Name"]

    def _until_state(self, iid: str, states: tuple[str, ...], limit: float = 900.0) -> None:
        t0 = time.monotonic()
        while (state := self._state(iid)) not in states:
            if state in GONE and "running" in states:
                raise CommandFailed(f"instance {iid} ended while booting")
            if time.monotonic() - t0 > limit:
                raise CommandFailed(f"instance {iid} still {state} after {limit:.0f} s")
            time.sleep(POLL)

    def _first_command(self, iid: str, limit: float = 900.0) -> None:
        """The SSM agent registers some seconds after boot: until then a command is refused."""
        t0 = time.monotonic()
        while True:
            try:
                return self.exec(iid, "true")
            except self._error as exc:
                if exc.response["Error"]["Code"] != "InvalidInstanceId" or time.monotonic() - t0 > limit:
                    raise
            time.sleep(POLL)

    def exec(self, sandbox, command):
        cid = self.ssm.send_command(
            InstanceIds=[sandbox], DocumentName="AWS-RunShellScript", Parameters={"commands": [command]}
        )["Command"]["CommandId"]
        while True:
            try:
                r = self.ssm.get_command_invocation(CommandId=cid, InstanceId=sandbox)
            except self._error as exc:
                if exc.response["Error"]["Code"] != "InvocationDoesNotExist":
                    raise
                time.sleep(0.1)
                continue
            if r["Status"] not in ("Pending", "InProgress", "Delayed"):
                break
            time.sleep(0.1)
        if r["Status"] != "Success":
            raise CommandFailed(f"{r['Status']}: {r.get('StandardErrorContent', '')[-200:]!r}")

    def upload(self, sandbox, path, data):
        raise NotImplementedError

    def download(self, sandbox, path):
        raise NotImplementedError

    def remove(self, sandbox):
        """Terminate, and wait until the instance is gone (its slot of the quota is free)."""
        self.ec2.terminate_instances(InstanceIds=[sandbox])
        self._until_state(sandbox, GONE)

    def _labelled(self, filters: list[dict]) -> list[dict]:
        alive = {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]}
        out = []
        for page in self.ec2.get_paginator("describe_instances").paginate(Filters=[*filters, alive]):
            out += [i for res in page["Reservations"] for i in res["Instances"]]
        return out

    def owned(self) -> list[Owned]:
        """Every live instance carrying the project's tag, from any run."""
        out = []
        for i in self._labelled([{"Name": "tag-key", "Values": [TAG]}]):
            tags = {t["Key"]: t["Value"] for t in i.get("Tags", [])}
            created = tags.get(CREATED) or i["LaunchTime"].timestamp()
            out.append(Owned(i["InstanceId"], tags.get(TAG, ""), float(created), tags.get(OWNER, "")))
        return out

    def remove_owned(self, s: Owned) -> None:
        self.ec2.terminate_instances(InstanceIds=[s.id])

    def sweep(self, label):
        ids = [i["InstanceId"] for i in self._labelled([{"Name": f"tag:{TAG}", "Values": [label]}])]
        if ids:
            self.ec2.terminate_instances(InstanceIds=ids)
        return len(ids)
