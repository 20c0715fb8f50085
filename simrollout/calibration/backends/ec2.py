"""Cloud VMs on EC2 through boto3: RunInstances -> running -> SSM command -> terminate.

Needs AWS credentials, an AMI with the SSM agent (``image``), and an instance profile allowing SSM
(``SIMROLLOUT_EC2_PROFILE``).
"""

from __future__ import annotations

import os
import time

from . import BackendUnavailable, CommandFailed, require

TAG = "simrollout-probe"


class EC2Backend:
    name = "ec2"
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
        self.boto3, self.type = boto3, instance_type
        self.ec2, self.ssm = session.client("ec2"), session.client("ssm")

    def info(self):
        return {"backend_version": self.boto3.__version__, "engine_version": self.type}

    def create(self, image, label):
        r = self.ec2.run_instances(
            ImageId=image,
            InstanceType=self.type,
            MinCount=1,
            MaxCount=1,
            IamInstanceProfile={"Name": os.environ["SIMROLLOUT_EC2_PROFILE"]},
            TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": TAG, "Value": label}]}],
        )
        iid = r["Instances"][0]["InstanceId"]
        try:
            self.ec2.get_waiter("instance_running").wait(InstanceIds=[iid])
            for _ in range(600):  # the SSM agent registers some seconds after boot
                info = self.ssm.describe_instance_information(
                    Filters=[{"Key": "InstanceIds", "Values": [iid]}]
                )["InstanceInformationList"]
                if info:
                    break
                time.sleep(1)
            self.exec(iid, "true")
        except Exception:
            self.remove(iid)
            raise
        return iid

    def exec(self, sandbox, command):
        cid = self.ssm.send_command(
            InstanceIds=[sandbox], DocumentName="AWS-RunShellScript", Parameters={"commands": [command]}
        )["Command"]["CommandId"]
        while True:
            time.sleep(0.1)
            try:
                r = self.ssm.get_command_invocation(CommandId=cid, InstanceId=sandbox)
            except self.ssm.exceptions.InvocationDoesNotExist:
                continue
            if r["Status"] not in ("Pending", "InProgress", "Delayed"):
                break
        if r["Status"] != "Success":
            raise CommandFailed(r["Status"])

    def upload(self, sandbox, path, data):
        raise NotImplementedError

    def download(self, sandbox, path):
        raise NotImplementedError

    def remove(self, sandbox):
        self.ec2.terminate_instances(InstanceIds=[sandbox])

    def sweep(self, label):
        r = self.ec2.describe_instances(Filters=[{"Name": f"tag:{TAG}", "Values": [label]}])
        ids = [
            i["InstanceId"]
            for res in r["Reservations"]
            for i in res["Instances"]
            if i["State"]["Name"] not in ("terminated", "shutting-down")
        ]
        if ids:
            self.ec2.terminate_instances(InstanceIds=ids)
        return len(ids)
