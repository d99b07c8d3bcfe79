"""Write the engines' own schemas into tests/engines/schemas/, for the tests that validate what `ddplab sky` and
`ddplab k8s` write, offline and without the engines' packages (skypilot pulls ~50 packages: fastapi, uvicorn,
sqlalchemy, pandas, psycopg2...). Run it in a throwaway environment that has the pinned packages:

    python3 -m venv /tmp/engvenv && /tmp/engvenv/bin/pip install skypilot==0.14.1 kubeflow-trainer-api==2.3.0
    /tmp/engvenv/bin/python tools/vendor_engine_schemas.py

SkyPilot: the JSON schemas its task loader validates against (sky/utils/schemas.py: the task, and the resources and
storage schemas it applies to `resources` and `file_mounts`). Kubeflow Trainer: the JSON schema of the API models'
TrainJob (kubeflow_trainer_api.models, generated from the trainer's OpenAPI spec), by alias: the YAML's key names.
"""

from __future__ import annotations

import json
import sys
from importlib import metadata
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "tests" / "engines" / "schemas"


def main() -> int:
    from kubeflow_trainer_api.models import TrainerV1alpha1TrainJob
    from sky.utils import schemas

    sky_version = metadata.version("skypilot")
    sky = {
        "source": f"skypilot=={sky_version}, sky/utils/schemas.py: get_task_schema(), get_resources_schema(), "
        "get_storage_schema()",
        "task": schemas.get_task_schema(),
        "resources": schemas.get_resources_schema(),
        "storage": schemas.get_storage_schema(),
    }
    kf_version = metadata.version("kubeflow-trainer-api")
    trainjob = TrainerV1alpha1TrainJob.model_json_schema(by_alias=True)
    _one_of_as_written(trainjob)
    kf = {
        "source": f"kubeflow-trainer-api=={kf_version}, TrainerV1alpha1TrainJob.model_json_schema(by_alias=True); "
        "oneOf wrappers (a Quantity: str or float) as the YAML writes them",
        "trainjob": trainjob,
    }
    OUT.mkdir(parents=True, exist_ok=True)
    for name, data in ((f"skypilot-{sky_version}.json", sky), (f"kubeflow-trainer-api-{kf_version}.json", kf)):
        (OUT / name).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        print(f"wrote {OUT / name}")
    return 0


def _one_of_as_written(schema: dict) -> None:
    """The generated models wrap a oneOf (k8s' Quantity: "8" or 8) in a class with actual_instance; the YAML holds
    the value itself: its $def becomes the anyOf of the types the model lists in one_of_schemas."""
    from kubeflow_trainer_api import models

    types = {"str": "string", "float": "number", "int": "integer", "bool": "boolean"}
    for name in schema.get("$defs", {}):
        model = getattr(models, name, None)
        field = getattr(model, "model_fields", {}).get("one_of_schemas")  # a pydantic field: its default holds them
        kinds = field.default if field is not None else None
        if kinds:
            schema["$defs"][name] = {"anyOf": [{"type": types[k]} for k in sorted(kinds)]}


if __name__ == "__main__":
    sys.exit(main())
