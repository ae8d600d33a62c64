"""Check room/z2jh/values.yaml offline, as far as it can be without helm or a cluster.

  python room/z2jh/validate.py            YAML, the chart's schema, the two image references
  python room/z2jh/validate.py --traits   also the pass-through keys against the installed jupyterhub and
                                          NativeAuthenticator (run with the hub's venv: make test-hub does)

What it checks:
1. values.yaml parses as YAML (PyYAML's safe loader).
2. Merged over the chart's default values the way helm merges them (maps key by key, anything else
   replaced, null deletes a key), the result validates against the chart's values.schema.json
   (JSON Schema draft 7, with jsonschema). Both files are vendored in chart-4.4.0/ from the chart's
   repository, jupyterhub/zero-to-jupyterhub-k8s at tag 4.4.0 (commit 5c5f5df751588a68a7781ead01d0f62e88e2e72f):
   values.yaml as it is; values.schema.json generated from jupyterhub/values.schema.yaml the way the
   chart's tools/generate-json-schema.py generates the file packaged in the chart (descriptions dropped).
   The chart's schema forbids unknown keys almost everywhere, so a misspelt key fails here as it
   would fail `helm install`.
3. The init container runs the same image as the learners' servers.
4. Where the schema leaves the values open:
   - kubespawner_override in profileList: each key must be one of KUBESPAWNER_OVERRIDE_KEYS, an explicit
     list of KubeSpawner 7.0.0 / JupyterHub Spawner traits (checked by hand against kubespawner 7.0.0's
     spawner.py and jupyterhub 5.5.0's Spawner; KubeSpawner is not installed here);
   - hub.config (--traits): every Class.trait must be a configurable trait of that class in the
     installed packages (JupyterHub, Authenticator, NativeAuthenticator), and authenticator_class an
     entry point JupyterHub can load.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
VALUES = HERE / "values.yaml"
CHART = HERE / "chart-4.4.0"

KUBESPAWNER_OVERRIDE_KEYS = frozenset({
    # KubeSpawner 7.0.0 traits
    "extra_resource_limits", "extra_resource_guarantees", "node_selector", "tolerations", "image",
    "extra_labels", "extra_annotations", "environment",
    # jupyterhub.spawner.Spawner traits (KubeSpawner's base class)
    "mem_limit", "mem_guarantee", "cpu_limit", "cpu_guarantee", "default_url", "cmd",
})


class Invalid(Exception):
    pass


def helm_merge(base, override):
    """Helm's coalescing of user values over chart defaults: maps merged, null removes, the rest replaced."""
    if not isinstance(base, dict) or not isinstance(override, dict):
        return copy.deepcopy(override)
    out = copy.deepcopy(base)
    for key, value in override.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = helm_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def load_values(path: Path = VALUES) -> dict:
    import yaml

    try:
        values = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise Invalid(f"{path} is not valid YAML: {e}") from None
    if not isinstance(values, dict):
        raise Invalid(f"{path} is not a mapping of values")
    return values


def check_schema(values: dict) -> None:
    import jsonschema
    import yaml

    defaults = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    merged = helm_merge(defaults, values)
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(merged), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [f"  {'.'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}" for e in errors[:20]]
        raise Invalid("values.yaml does not validate against the chart's values.schema.json:\n" + "\n".join(lines))


def check_images(values: dict) -> None:
    image = values["singleuser"]["image"]
    want = f"{image['name']}:{image['tag']}"
    for init in values["singleuser"].get("initContainers") or []:
        if init.get("image") != want:
            raise Invalid(f"the init container {init.get('name')} runs {init.get('image')}, the servers run {want}")


def check_overrides(values: dict) -> None:
    for profile in values["singleuser"].get("profileList") or []:
        unknown = set(profile.get("kubespawner_override") or {}) - KUBESPAWNER_OVERRIDE_KEYS
        if unknown:
            raise Invalid(f"profile {profile.get('display_name')!r}: "
                          "kubespawner_override keys not in the checked list: "
                          f"{sorted(unknown)}")


def check_traits(values: dict) -> None:
    """hub.config against the installed classes (needs jupyterhub and nativeauthenticator)."""
    from jupyterhub.app import JupyterHub
    from jupyterhub.auth import Authenticator
    from nativeauthenticator import NativeAuthenticator

    classes = {"JupyterHub": JupyterHub, "Authenticator": Authenticator, "NativeAuthenticator": NativeAuthenticator}
    for cls_name, settings in (values.get("hub", {}).get("config") or {}).items():
        cls = classes.get(cls_name)
        if cls is None:
            raise Invalid(f"hub.config.{cls_name}: not a class this check knows ({sorted(classes)})")
        traits = cls.class_traits(config=True)
        for key in settings:
            if key not in traits:
                raise Invalid(f"hub.config.{cls_name}.{key} is not a configurable trait of {cls.__module__}.{cls_name}")
    auth = (values["hub"]["config"].get("JupyterHub") or {}).get("authenticator_class")
    if auth:
        from importlib.metadata import entry_points

        names = {ep.name for ep in entry_points(group="jupyterhub.authenticators")}
        if auth not in names and "." not in auth:
            raise Invalid(f"hub.config.JupyterHub.authenticator_class={auth!r} "
                          "is no jupyterhub.authenticators entry point "
                          f"installed here ({sorted(names)})")


def validate(path: Path = VALUES, *, traits: bool = False) -> list[str]:
    values = load_values(path)
    done = ["YAML parses"]
    check_schema(values)
    done.append("merged over the chart 4.4.0 defaults, it validates against the chart's values.schema.json")
    check_images(values)
    check_overrides(values)
    done.append("one image for servers and init container; kubespawner_override keys are known traits")
    if traits:
        check_traits(values)
        done.append("hub.config keys are traits of the installed JupyterHub, Authenticator, NativeAuthenticator")
    return done


def main(argv: list[str]) -> int:
    try:
        for line in validate(traits="--traits" in argv):
            print(f"z2jh values: {line}")
    except Invalid as e:
        print(f"z2jh values: INVALID: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
