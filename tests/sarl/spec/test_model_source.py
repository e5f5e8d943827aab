"""Model sources (``sarl.spec.model_source``): ``hf://``, bare Hub ids, ``s3://`` and ``pvc://``
parse to one canonical form; hostile values (path traversal, empty segments, bad claim names,
credentials, unknown schemes) are refused by ``spec.model.name`` with a message naming the field
and never the credential; ``spec.resources.hf_endpoint`` takes a bare http(s) URL only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sarl.spec import SpecError, load_experiment
from sarl.spec.model_source import ModelUriError, parse_model_uri

SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"


def _exp(model: str, **resources: Any) -> dict[str, Any]:
    return {"metadata": {"name": "x"}, "spec": {"model": {"name": model}, "resources": resources}}


@pytest.mark.parametrize(
    ("value", "kind", "uri", "storage_uri"),
    [
        ("Qwen/Qwen3-4B", "hub", "hf://Qwen/Qwen3-4B", None),
        ("gpt2", "hub", "hf://gpt2", None),
        ("hf://Qwen/Qwen3-4B/", "hub", "hf://Qwen/Qwen3-4B", None),
        ("s3://models/qwen/Qwen3-4B", "s3", "s3://models/qwen/Qwen3-4B", "s3://models/qwen/Qwen3-4B/"),
        ("s3://models/Qwen3-4B/", "s3", "s3://models/Qwen3-4B", "s3://models/Qwen3-4B/"),
        ("pvc://model-cache/qwen/Qwen3-4B", "pvc", "pvc://model-cache/qwen/Qwen3-4B",
         "pvc://model-cache/qwen/Qwen3-4B"),
        ("pvc://model-cache", "pvc", "pvc://model-cache", "pvc://model-cache"),
        ("/data/models/qwen", "local", "/data/models/qwen", None),
        ("./my-model", "local", "./my-model", None),
        ("builtin:tiny-qwen", "builtin", "builtin:tiny-qwen", None),
    ],
)  # fmt: skip
def test_sources_parse(value: str, kind: str, uri: str, storage_uri: str | None) -> None:
    src = parse_model_uri(value, "spec.model.name")
    assert (src.kind, src.uri) == (kind, uri)
    if storage_uri is None:
        with pytest.raises(ValueError):
            src.storage_uri()
    else:
        assert src.storage_uri() == storage_uri
    # The spec accepts every one of them.
    assert load_experiment(_exp(value)).spec.model.name == value


def test_where_jobs_find_the_model(tmp_path: Path) -> None:
    s3 = parse_model_uri("s3://models/qwen/Qwen3-4B", "f")
    assert s3.local_dir(tmp_path) == tmp_path / "models" / "models" / "qwen" / "Qwen3-4B"
    pvc = parse_model_uri("pvc://model-cache/qwen", "f")
    assert pvc.local_dir(tmp_path) == Path("/mnt/sarl-models/model-cache/qwen")
    with pytest.raises(ValueError):
        parse_model_uri("Qwen/Qwen3-4B", "f").local_dir(tmp_path)


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("s3://models/../etc/passwd", "'..' segment"),
        ("s3://models/qwen/../../other", "'..' segment"),
        ("s3://models/a//b", "empty"),
        ("s3://models/./a", "'.' or '..'"),
        ("s3://models", "names no directory"),
        ("s3://models/", "names no directory"),
        ("s3://Bad_Bucket/x", "not an S3 bucket name"),
        ("s3://ab/x", "not an S3 bucket name"),
        ("s3:///x", "not an S3 bucket name"),
        ("s3://models/a b", "character other than"),
        ("s3://models/a?versionId=1", "character other than"),
        ("pvc://Model_Cache/qwen", "not a PersistentVolumeClaim name"),
        ("pvc://-cache/qwen", "not a PersistentVolumeClaim name"),
        ("pvc:///qwen", "not a PersistentVolumeClaim name"),
        ("pvc://cache/../../etc", "'..' segment"),
        ("pvc://cache/a//b", "empty"),
        ("hf://Qwen/Qwen3-4B/extra", "not a Hugging Face Hub id"),
        ("hf://Qwen/..", "not a Hugging Face Hub id"),
        ("hf://", "not a Hugging Face Hub id"),
        ("gs://bucket/model", "unsupported scheme 'gs'"),
        ("http://example.com/model", "unsupported scheme 'http'"),
        ("s3://models:9000/x", "no credentials or port"),
    ],
)
def test_hostile_sources_are_refused_naming_the_field(value: str, words: str) -> None:
    with pytest.raises(ModelUriError) as info:
        parse_model_uri(value, "spec.model.name")
    assert str(info.value).startswith("spec.model.name: ") and words in str(info.value)
    with pytest.raises(SpecError) as spec_info:
        load_experiment(_exp(value))
    message = str(spec_info.value)
    assert "spec.model.name" in message and words in message
    assert "Traceback" not in message


@pytest.mark.parametrize(
    "value",
    [
        f"s3://AKIAIOSFODNN7EXAMPLE:{SECRET}@models/qwen",
        f"s3://{SECRET}@models/qwen",
        f"pvc://admin:{SECRET}@cache/qwen",
        f"hf://user:{SECRET}@Qwen/Qwen3-4B",
    ],
)
def test_credentials_in_a_model_uri_are_refused_and_not_echoed(value: str) -> None:
    with pytest.raises(ModelUriError) as info:
        parse_model_uri(value, "spec.model.name")
    assert SECRET not in str(info.value) and "credentials" in str(info.value)
    with pytest.raises(SpecError) as spec_info:
        load_experiment(_exp(value))
    assert SECRET not in str(spec_info.value) and "spec.model.name" in str(spec_info.value)


def test_hf_endpoint_is_a_bare_url() -> None:
    exp = load_experiment(_exp("Qwen/Qwen3-4B", hf_endpoint="https://hf-mirror.internal/"))
    assert exp.spec.resources.hf_endpoint == "https://hf-mirror.internal"
    assert load_experiment(_exp("gpt2")).spec.resources.hf_endpoint is None


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("hf-mirror.internal", "http(s) URL"),
        ("ftp://hf-mirror.internal", "http(s) URL"),
        ("https://hf-mirror.internal/?token=x", "without query"),
        ("https://hf-mirror.internal:99999", "http(s) URL"),
    ],
)
def test_hf_endpoint_refused_naming_the_field(value: str, words: str) -> None:
    with pytest.raises(SpecError) as info:
        load_experiment(_exp("gpt2", hf_endpoint=value))
    assert "spec.resources.hf_endpoint" in str(info.value) and words in str(info.value)


def test_hf_endpoint_with_credentials_is_not_echoed() -> None:
    with pytest.raises(SpecError) as info:
        load_experiment(_exp("gpt2", hf_endpoint=f"https://me:{SECRET}@hf-mirror.internal"))
    assert SECRET not in str(info.value) and "hf_endpoint" in str(info.value)
