"""The SAM transform of template.yaml under one parameter combination, and
the checks only its output can answer: the resources SAM generates (the
schedules' roles, the functions' TracingConfig) carry the knobs too.

Run by check.sh with the pinned venv's python (samtranslator comes with
aws-sam-cli): python transformed.py TEMPLATE Key=Value ...
Prints nothing and exits 0 when every check holds; otherwise one line per
problem and exit 1. No AWS call is made (the managed policy loader is a
stand-in that knows no policy, which this template never names).
"""
import os
import sys

from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse

BOUNDARY = {"Fn::If": ["HasPermissionsBoundary", {"Ref": "PermissionsBoundary"}, {"Ref": "AWS::NoValue"}]}


class NoPolicies:
    def load(self):
        return {}


def main(argv):
    os.environ.setdefault("AWS_DEFAULT_REGION", "eu-west-1")
    with open(argv[1]) as f:
        template = yaml_parse(f.read())
    # What `sam package` would do: the transform accepts S3 code only.
    for r in template["Resources"].values():
        if r.get("Type") == "AWS::Serverless::Function":
            r["Properties"]["CodeUri"] = "s3://bucket/key"
    params = dict(a.split("=", 1) for a in argv[2:])
    tracing = params.get("Tracing", "Disabled")
    out = transform(template, params, NoPolicies())
    problems = []
    roles = functions = 0
    for rid, r in out["Resources"].items():
        props = r.get("Properties", {})
        if r["Type"] == "AWS::IAM::Role":
            roles += 1
            if props.get("PermissionsBoundary") != BOUNDARY:
                problems.append(f"{rid}: PermissionsBoundary is {props.get('PermissionsBoundary')!r}, not the parameter's")
        if r["Type"] == "AWS::Lambda::Function":
            functions += 1
            mode = props.get("TracingConfig", {}).get("Mode")
            if tracing == "Disabled" and "TracingConfig" in props:
                problems.append(f"{rid}: TracingConfig {props['TracingConfig']!r} while Tracing is Disabled")
            if tracing != "Disabled" and mode != {"Ref": "Tracing"}:
                problems.append(f"{rid}: TracingConfig {props.get('TracingConfig')!r}, want Mode from the Tracing parameter")
    # Five functions' roles and the three schedules' roles (four functions
    # and five roles when MigrationsEnabled=false leaves migrate out, but
    # the conditions stay in the output: every resource is there).
    if roles != 8 or functions != 5:
        problems.append(f"{roles} roles and {functions} functions after the transform, want 8 and 5: teach this check the new ones")
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
