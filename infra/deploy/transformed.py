"""The template under each parameter combination of combinations.txt:

- the SAM transform's output, and the checks only it can answer: the
  resources SAM generates (the schedules' roles, the functions'
  TracingConfig) carry the knobs too;
- the template rendered with the combination's values as its parameters'
  defaults, written to OUTDIR/<name>.yaml, for check.sh to lint all of
  them in one cfn-lint run (cfn-lint resolves a Ref to a parameter's
  default, as it does with --parameters, which takes one template a run).

Run by check.sh with the pinned venv's python (samtranslator comes with
aws-sam-cli): python transformed.py TEMPLATE COMBINATIONS OUTDIR
Prints the combinations' names, one a line, on stdout, and the problems
on stderr (exit 1 when there is any). No AWS call is made (the managed
policy loader is a stand-in that knows no policy, which this template
never names).
"""
import copy
import json
import logging
import os
import re
import sys

from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse

BOUNDARY = {"Fn::If": ["HasPermissionsBoundary", {"Ref": "PermissionsBoundary"}, {"Ref": "AWS::NoValue"}]}


class NoPolicies:
    def load(self):
        return {}


def combinations(path):
    out = []
    with open(path) as f:
        for line in f:
            fields = line.split()
            if not fields or fields[0].startswith("#"):
                continue
            out.append((fields[0], dict(kv.split("=", 1) for kv in fields[1:])))
    return out


def render(text, params):
    """text with each parameter's Default line set to params' value."""
    for name, value in params.items():
        pattern = re.compile(r"(^  " + re.escape(name) + r":\n(?:    .*\n)*?    Default: ).*$", re.M)
        # A Number parameter's default is written as a number, as in the template.
        literal = value if re.fullmatch(r"[0-9]+", value) else json.dumps(value)
        text, n = pattern.subn(lambda m: m.group(1) + literal, text, count=1)
        if n != 1:
            raise SystemExit(f"transformed.py: no Default line for parameter {name}")
    return text


def check(template, params):
    template = copy.deepcopy(template)
    # What `sam package` would do: the transform accepts S3 code only.
    for r in template["Resources"].values():
        if r.get("Type") == "AWS::Serverless::Function":
            r["Properties"]["CodeUri"] = "s3://bucket/key"
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
    # Seven functions' roles and the five schedules' roles (fill, sweep,
    # prune, deliver, relay; fewer when MigrationsEnabled=false leaves
    # migrate out or an empty RelayTarget the relay, but the conditions
    # stay in the output: every resource is there).
    if roles != 12 or functions != 7:
        problems.append(f"{roles} roles and {functions} functions after the transform, want 12 and 7: teach this check the new ones")
    return problems


def main(argv):
    os.environ.setdefault("AWS_DEFAULT_REGION", "eu-west-1")
    # The translator's metrics are for AWS's service, which this is not.
    logging.getLogger("samtranslator.metrics").setLevel(logging.ERROR)
    with open(argv[1]) as f:
        text = f.read()
    template = yaml_parse(text)
    os.makedirs(argv[3], exist_ok=True)
    failed = False
    for name, params in combinations(argv[2]):
        for p in check(template, params):
            print(f"{name}: {p}", file=sys.stderr)
            failed = True
        with open(os.path.join(argv[3], name + ".yaml"), "w") as f:
            f.write(render(text, params))
        print(name)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
