"""The deployment manifests start a recipe that exists with a config rayrl accepts."""

import shlex
from pathlib import Path

import yaml

from rayrl.config import load_config

ROOT = Path(__file__).resolve().parents[2]


def _check_command(command: str) -> None:
    argv = shlex.split(command)
    assert argv[0] == "python" and (ROOT / argv[1]).is_file(), argv[:2]
    assert argv[2] == "--config" and (ROOT / argv[3]).is_file(), argv[2:4]
    cfg = load_config(ROOT / argv[3], argv[4:])  # raises naming any bad key
    assert cfg.scheduler.type == "ray" and cfg.metrics.run_name and cfg.checkpoint.every_steps > 0


def test_kuberay_rayjob_runs_a_valid_recipe_that_resumes():
    job = yaml.safe_load((ROOT / "deploy" / "rayjob.yaml").read_text())
    assert job["kind"] == "RayJob" and job["spec"]["backoffLimit"] >= 1
    _check_command(job["spec"]["entrypoint"])
    images = {c["image"] for group in [job["spec"]["rayClusterSpec"]["headGroupSpec"],
                                       *job["spec"]["rayClusterSpec"]["workerGroupSpecs"]]
              for c in group["template"]["spec"]["containers"]}
    assert images == {"rayrl:gpu"}


def test_cluster_launcher_yaml_documents_a_valid_job_submit():
    text = (ROOT / "deploy" / "cluster.yaml").read_text()
    cluster = yaml.safe_load(text)
    assert cluster["docker"]["image"] == "rayrl:gpu"
    submit = " ".join(line.lstrip("#").strip().rstrip("\\") for line in text.splitlines()
                      if line.startswith("#   ray job submit") or line.startswith("#     "))
    _check_command(submit.split(" -- ", 1)[1])


def test_dockerfile_has_the_gpu_image_last_and_a_cpu_test_target():
    stages = [line.split()[-1] for line in (ROOT / "Dockerfile").read_text().splitlines() if line.startswith("FROM ")]
    assert stages == ["cpu-test", "gpu"]


# the fields KubeRay's v1 CRDs define at each level the manifest uses (RayJobSpec, RayClusterSpec, HeadGroupSpec,
# WorkerGroupSpec), and those a group must set; a misspelt key is dropped by the API server without a word
RAYJOB_SPEC = {"activeDeadlineSeconds", "backoffLimit", "rayClusterSpec", "submitterPodTemplate", "metadata",
               "clusterSelector", "submitterConfig", "managedBy", "deletionStrategy", "entrypoint", "runtimeEnvYAML",
               "jobId", "submissionMode", "entrypointResources", "entrypointNumCpus", "entrypointNumGpus",
               "ttlSecondsAfterFinished", "shutdownAfterJobFinishes", "suspend", "schedule"}
CLUSTER_SPEC = {"rayVersion", "enableInTreeAutoscaling", "autoscalerOptions", "headGroupSpec", "workerGroupSpecs",
                "headServiceAnnotations", "suspend", "managedBy", "gcsFaultToleranceOptions", "upgradeStrategy"}
HEAD_GROUP = {"serviceType", "headService", "enableIngress", "rayStartParams", "template"}
WORKER_GROUP = {"groupName", "replicas", "minReplicas", "maxReplicas", "numOfHosts", "idleTimeoutSeconds",
                "rayStartParams", "template", "scaleStrategy", "suspend"}


def test_kuberay_rayjob_uses_the_crd_fields_and_two_kinds_of_node():
    job = yaml.safe_load((ROOT / "deploy" / "rayjob.yaml").read_text())
    spec, cluster = job["spec"], job["spec"]["rayClusterSpec"]
    assert job["apiVersion"] == "ray.io/v1" and set(spec) <= RAYJOB_SPEC, set(spec) - RAYJOB_SPEC
    assert set(cluster) <= CLUSTER_SPEC, set(cluster) - CLUSTER_SPEC
    head = set(cluster["headGroupSpec"])
    assert head <= HEAD_GROUP and {"template", "rayStartParams"} <= head
    gpus = {}
    for group in cluster["workerGroupSpecs"]:
        assert set(group) <= WORKER_GROUP and {"groupName", "minReplicas", "maxReplicas", "template"} <= set(group)
        assert all(isinstance(group[k], int) for k in ("replicas", "minReplicas", "maxReplicas") if k in group)
        assert group["minReplicas"] <= group.get("replicas", group["minReplicas"]) <= group["maxReplicas"]
        assert all(isinstance(v, str) for v in group["rayStartParams"].values())  # the CRD's map of strings
        gpus[group["groupName"]] = int(group["template"]["spec"]["containers"][0]["resources"]["limits"]
                                       ["nvidia.com/gpu"])
    assert all(isinstance(v, str) for v in cluster["headGroupSpec"]["rayStartParams"].values())
    # the learner's node (2 GPUs: learner and first rollout worker) and nodes of one GPU for the elastic fleet
    assert gpus == {"gpu": 2, "rollout-spot": 1}
