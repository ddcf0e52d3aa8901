"""The OCI backend's parsers and policies without a registry: auth files, challenges, entry manifests, references
(Hypothesis: whatever a registry, a mounted Secret or a user hands them, they answer or raise ValueError), the
plain-HTTP rule and where credentials come from."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trtwarm.errors import ConfigError
from trtwarm.remote.oci.auth import load_credentials, match, parse_auth_file, parse_challenge
from trtwarm.remote.oci.layout import ENTRY_TYPE, REF_TYPE, check_entry_manifest, entry_manifest
from trtwarm.remote.oci.url import parse, split_reference

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner,
                                                                                 max_size=4), max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(st.one_of(JSON.map(lambda d: json.dumps(d).encode()),
                 st.dictionaries(st.text(max_size=20), JSON, max_size=3).map(
                     lambda d: json.dumps({"auths": d}).encode()),
                 st.binary(max_size=200)))
def test_an_auth_file_parses_or_raises_value_error(data: bytes) -> None:
    try:
        table = parse_auth_file(data, "x")
    except (ValueError, UnicodeDecodeError):
        return
    assert all(isinstance(k, str) for k in table)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=120))
def test_a_challenge_parses_or_raises_value_error(header: str) -> None:
    try:
        scheme, params = parse_challenge(header)
    except ValueError:
        return
    assert scheme and all(isinstance(v, str) for v in params.values())


@settings(max_examples=300, deadline=None)
@given(st.one_of(JSON.map(lambda d: json.dumps(d).encode()), st.binary(max_size=200),
                 st.fixed_dictionaries({"schemaVersion": st.just(2), "artifactType": st.just(ENTRY_TYPE),
                                        "config": JSON, "layers": JSON}).map(lambda d: json.dumps(d).encode())))
def test_an_entry_manifest_parses_or_raises_value_error(data: bytes) -> None:
    try:
        config, layers = check_entry_manifest(data)
    except (ValueError, UnicodeDecodeError):
        return
    assert config["mediaType"] == REF_TYPE and all(len(sha) == 64 for sha, _ in layers)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80))
def test_a_reference_parses_or_raises_value_error(text: str) -> None:
    try:
        registry, repository, _tag = split_reference(text, tag=True)
    except ValueError:
        return
    assert registry and repository and ".." not in repository


def test_the_bearer_challenge_of_a_real_registry() -> None:
    scheme, params = parse_challenge('Bearer realm="https://auth.docker.io/token",service="registry.docker.io",'
                                     'scope="repository:library/busybox:pull"')
    assert scheme == "bearer" and params["scope"] == "repository:library/busybox:pull"
    assert parse_challenge('Basic realm="Registry Realm"') == ("basic", {"realm": "Registry Realm"})


def test_an_entry_manifest_round_trips() -> None:
    files = [{"path": "e.plan", "sha256": "a" * 64, "bytes": 3, "role": "engine"}]
    ref = {"schema": "trtwarm.ref/v1", "manifest": {"key": "b" * 64, "name": "n", "created": 0, "files": files},
           "signature": None}
    config, layers = check_entry_manifest(entry_manifest(ref, b"{}", files))
    assert layers == [("a" * 64, 3)] and config["size"] == 2


@pytest.mark.parametrize(("registry", "environ", "scheme"), [
    ("127.0.0.1:5000", {}, "http"), ("localhost:5000", {}, "http"), ("[::1]:5000", {}, "http"),
    ("registry.example.com", {}, "https"), ("registry.example.com", {"TRTWARM_OCI_ALLOW_HTTP": "true"}, "http"),
    ("10.0.0.1:5000", {"TRTWARM_INSECURE_REGISTRY": "1"}, "http"), ("10.0.0.1:5000", {}, "https")])
def test_plain_http_only_for_loopback_or_when_asked(registry: str, environ: dict[str, str], scheme: str) -> None:
    assert parse(f"oci://{registry}/engines/prod", environ).scheme == scheme


@pytest.mark.parametrize("url", ["oci://registry.example.com", "oci://registry.example.com/Engines",
                                 "oci://registry.example.com/a/../b", "oci://noport/engines",
                                 "oci://registry.example.com/engines:tag"])
def test_a_bad_oci_url_is_a_configuration_error(url: str) -> None:
    with pytest.raises(ConfigError):
        parse(url, {})


def test_credentials_come_from_the_first_auth_file_and_the_most_specific_entry(tmp_path: Path) -> None:
    def auth(user: str) -> dict[str, str]:
        return {"auth": base64.b64encode(f"{user}:pw-{user}".encode()).decode()}

    podman = tmp_path / "run" / "containers" / "auth.json"
    podman.parent.mkdir(parents=True)
    podman.write_text(json.dumps({"auths": {"reg.io": auth("host"), "reg.io/team": auth("team"),
                                            "https://reg.io/team/engines": auth("repo")}}))
    docker = tmp_path / ".docker" / "config.json"
    docker.parent.mkdir()
    docker.write_text(json.dumps({"auths": {"reg.io": auth("docker")}}))
    env = {"HOME": str(tmp_path), "XDG_RUNTIME_DIR": str(tmp_path / "run")}
    assert load_credentials("reg.io", "team/engines", env).username == "repo"
    assert load_credentials("reg.io", "team/other", env).username == "team"
    assert load_credentials("reg.io", "x", env).username == "host"
    assert load_credentials("other.io", "x", env) is None
    assert load_credentials("reg.io", "x", {"HOME": str(tmp_path)}).username == "docker"
    assert "pw-" not in repr(load_credentials("reg.io", "x", env))
    assert match({}, "reg.io", "a") is None


@pytest.mark.parametrize(("content", "says"), [
    ("not json", "malformed"), ('{"auths": {"r.io": {"auth": "bm9jb2xvbg=="}}}', "malformed"),
    ('{"credsStore": "desktop"}', "credential helper")])
def test_an_unusable_auth_file_fails_closed(tmp_path: Path, content: str, says: str) -> None:
    (tmp_path / "auth.json").write_text(content)
    with pytest.raises(ConfigError, match=says):
        load_credentials("r.io", "x", {"REGISTRY_AUTH_FILE": str(tmp_path / "auth.json")})
    with pytest.raises(ConfigError, match="does not exist"):
        load_credentials("r.io", "x", {"REGISTRY_AUTH_FILE": str(tmp_path / "absent.json")})


@settings(max_examples=300, deadline=None)
@given(st.one_of(JSON.map(lambda d: json.dumps(d).encode()), st.binary(max_size=200),
                 st.fixed_dictionaries({"Username": JSON, "Secret": JSON}).map(lambda d: json.dumps(d).encode())))
def test_a_credential_helper_answer_parses_or_raises_value_error_never_quoting_it(data: bytes) -> None:
    from trtwarm.remote.oci.credhelper import parse_answer

    try:
        found = parse_answer(data, "helper")
    except ValueError as exc:
        assert "Secret" not in str(exc).replace("Username and Secret", "")
        return
    assert found is None or found.password or found.identity_token


def test_which_helper_a_registry_gets_and_what_it_is_asked() -> None:
    from trtwarm.remote.oci.credhelper import helper_for, parse_answer, server_url

    doc = {"credsStore": "desktop", "credHelpers": {"https://123.dkr.ecr.us-east-1.amazonaws.com": "ecr-login",
                                                    "index.docker.io": "hub", "": "x"}}
    assert helper_for(doc, "123.dkr.ecr.us-east-1.amazonaws.com", "f") == "ecr-login"  # credHelpers first
    assert helper_for(doc, "docker.io", "f") == "hub"  # Docker Hub's aliases are one registry
    assert helper_for(doc, "ghcr.io", "f") == "desktop"  # else credsStore
    assert helper_for({"auths": {}}, "ghcr.io", "f") is None and helper_for({"credsStore": ""}, "r.io", "f") is None
    for bad in ("../../bin/sh", "a b", 7, ["x"]):
        with pytest.raises(ConfigError, match="not a helper name"):
            helper_for({"credsStore": bad}, "r.io", "f")
    assert server_url("docker.io") == "https://index.docker.io/v1/" and server_url("r.io:5000") == "r.io:5000"
    token = parse_answer(b'{"ServerURL": "", "Username": "<token>", "Secret": "refresh-1234"}', "h")
    assert token is not None and token.identity_token == "refresh-1234" and not token.username
    assert parse_answer(b'{"Username": "u", "Secret": ""}', "h") is None
    with pytest.raises(ValueError, match="twice"):
        parse_answer(b'{"Username": "u", "Secret": "a", "Secret": "b"}', "h")
