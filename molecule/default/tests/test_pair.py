"""testinfra checks of a converged simulated pair, run by molecule over the rank's real SSH."""


def _rank(host):
    return int(host.ansible.get_variables()["dspark_rank"])


def test_engine_runs_the_pinned_image(host):
    pin = host.ansible.get_variables()["dspark_pin"]
    engine = host.docker("dspark_vllm")
    assert engine.is_running
    assert engine.inspect()["Image"] == pin["image_id"]


def test_model_and_manifest_are_mounted_read_only(host):
    mounts = {m["Destination"]: m for m in host.docker("dspark_vllm").inspect()["Mounts"]}
    assert mounts["/model"]["RW"] is False
    assert mounts["/opt/r0b0tlab/runtime-manifest.json"]["RW"] is False


def test_engine_is_not_privileged(host):
    cfg = host.docker("dspark_vllm").inspect()["HostConfig"]
    assert cfg["Privileged"] is False
    assert cfg["CapAdd"] == ["IPC_LOCK"]


def test_only_the_head_serves_the_api(host):
    listening = host.socket("tcp://0.0.0.0:8888").is_listening
    assert listening is (_rank(host) == 0)


def test_worker_is_headless(host):
    args = host.docker("dspark_vllm").inspect()["Args"]
    assert ("--headless" in args) is (_rank(host) == 1)


def test_gpu_reports_sm121(host):
    out = host.check_output("nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader")
    assert out == "NVIDIA GB10, 12.1"
