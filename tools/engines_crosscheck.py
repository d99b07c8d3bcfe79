"""Check what `ddplab sky` and `ddplab k8s` write with the engines' own code, in a throwaway environment that has
them (see tools/vendor_engine_schemas.py for the pinned packages):

    /tmp/engvenv/bin/python tools/engines_crosscheck.py FILE.sky.yaml FILE.trainjob.yaml

SkyPilot: PyYAML's safe_load (SkyPilot's reader) and sky.Task.from_yaml_config (its task loader and schema checks;
offline, no cloud credentials needed). Kubeflow Trainer: TrainerV1alpha1TrainJob.from_dict. Also compares each
parse with tests/engines/yamlread.py's, the reader the suite uses without PyYAML.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "engines"))


def main(sky_file: str, trainjob_file: str) -> int:
    import sky
    import yaml
    import yamlread
    from kubeflow_trainer_api.models import TrainerV1alpha1TrainJob

    for path in (sky_file, trainjob_file):
        text = Path(path).read_text()
        assert yaml.safe_load(text) == yamlread.load(text), f"{path}: PyYAML and yamlread read it differently"
    config = yaml.safe_load(Path(sky_file).read_text())
    task = sky.Task.from_yaml_config(config)
    print(f"sky: {task.num_nodes} node(s), resources {task.resources}, run {len(task.run)} chars")
    job = TrainerV1alpha1TrainJob.from_dict(yaml.safe_load(Path(trainjob_file).read_text()))
    print(
        f"kubeflow: TrainJob {job.metadata.name}: {job.spec.trainer.num_nodes} node(s) x {job.spec.trainer.num_proc_per_node}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
