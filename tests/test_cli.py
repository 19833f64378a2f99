"""The command line: JSON contract, flags named after fields, errors with exit code 2."""

import json
import subprocess
import sys

from calc import estimate
from calc.cli import main


def test_estimate_json_matches_library(capsys) -> None:
    assert main(["estimate", "--model", "llama-3-8b", "--seq-len", "2048", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    expected = estimate({"model": "llama-3-8b", "training": {"seq_len": 2048}}).as_dict()
    assert report == json.loads(json.dumps(expected))


def test_report_has_the_documented_keys(capsys) -> None:
    main(["estimate", "--model", "gpt2", "--seq-len", "512", "--json"])
    report = json.loads(capsys.readouterr().out)
    for key in ("peak_bytes", "reserved_bytes", "device_bytes", "peak_phase", "phases",
                "components", "breakdown", "overhead", "host_bytes", "param_count",
                "trainable_param_count", "gpu", "utilization", "fits", "warnings",
                "confidence", "calc_version"):
        assert key in report


def test_file_and_flags_combine(tmp_path, capsys) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"model": "gpt2", "training": {"seq_len": 512}}))
    assert main(["estimate", str(path), "--batch", "4", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["scenario"]["training"]["micro_batch_size"] == 4
    assert report["scenario"]["training"]["seq_len"] == 512


def test_stdin_scenario() -> None:
    out = subprocess.run([sys.executable, "-m", "calc.cli", "estimate", "-", "--json"],
                         input='{"model": "gpt2", "training": {"seq_len": 256}}',
                         capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)["gpu"] == "h100-sxm-80gb"


def test_bad_input_exits_2_with_field_and_no_traceback() -> None:
    out = subprocess.run([sys.executable, "-m", "calc.cli", "estimate", "--model",
                          "llama-3-8b", "--tp", "3"], capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.strip() == \
        "calc: error: parallelism.tp: tp (3) must divide num_attention_heads (32)"
    assert "Traceback" not in out.stderr and out.stdout == ""


def test_missing_file_is_a_clear_error(capsys) -> None:
    assert main(["estimate", "/nonexistent.json"]) == 2
    assert "cannot read /nonexistent.json" in capsys.readouterr().err


def test_human_table_names_the_peak(capsys) -> None:
    assert main(["estimate", "--model", "llama-3.1-8b", "--seq-len", "8192", "--tp", "4",
                 "--gpu", "a100-40gb"]) == 0
    out = capsys.readouterr().out
    assert "does not fit" in out and "peak allocated" in out


def test_presets_lists_models_and_gpus(capsys) -> None:
    assert main(["presets", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    ids = {m["id"] for m in data["models"]}
    assert {"llama-3-8b", "deepseek-v3", "gpt2"} <= ids
    assert "a100-40gb" in {g["id"] for g in data["gpus"]}
