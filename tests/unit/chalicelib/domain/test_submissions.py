"""S3-triggered submissions without IO: marker keys and names, S3 notifications, owners, the digest, the
archive checks and the server-side packer, and the use case on the in-memory ports."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from chalicelib.domain import keys
from chalicelib.domain import submissions as sub
from chalicelib.memory import memory_ports
from chalicelib.memory._submissions import MemorySubmissionFiles
from chalicelib.services import context_archives, submissions
from det._archive import archive_bytes
from det._collect import collect
from stratus.contract.errors import InvalidMessageError
from stratus.harness._archive import extract

CONFIG = b"entrypoint: python3 train.py\nsearcher: {name: single, metric: loss, max_length: {batches: 5}}\n"


# ---- keys and names ---------------------------------------------------------------------------------


def test_a_marker_names_its_submission():
    assert sub.name_of_marker("submissions/digits-1.v2_a/submit") == "digits-1.v2_a"
    assert sub.status_key("digits") == "submissions/digits/status.json"


@pytest.mark.parametrize(
    ("key", "says"),
    [
        ("submissions/../contexts/submit", "may not hold '..'"),
        ("submissions/a..b/submit", "may not hold '..'"),
        ("submissions/a/b/submit", "has a '/'"),
        ("submissions/my run/submit", "letters, digits"),
        ("submissions/-x/submit", "starting with a letter or digit"),
        ("submissions//submit", "empty"),
        ("uploads/x/submit", "is not a submission marker"),
        ("submissions/" + "a" * 129 + "/submit", "1 to 128"),
    ],
)
def test_a_bad_name_is_refused_with_what_to_fix(key: str, says: str):
    with pytest.raises(sub.SubmissionNameError, match=says):
        sub.name_of_marker(key)


def test_a_refused_name_is_answered_beside_it_unless_its_key_has_dot_segments():
    assert sub.status_key_beside("submissions/my run/submit") == "submissions/my run/status.json"
    assert sub.status_key_beside("submissions/../contexts/submit") is None
    assert sub.status_key_beside("submissions//submit") is None


# ---- notifications and owners -----------------------------------------------------------------------


def _record(key: str, event: str = "ObjectCreated:Put", principal: str | None = None) -> dict:
    record: dict = {"eventName": event, "s3": {"bucket": {"name": "b"}, "object": {"key": key, "size": 0}}}
    if principal:
        record["userIdentity"] = {"principalId": principal}
    return record


def test_a_notification_gives_its_marker_uploads_with_keys_decoded():
    body = json.dumps(
        {
            "Records": [
                _record("submissions/my+run%2B1/submit", principal="AWS:AROA1:alice"),
                _record("x", "ObjectRemoved:Delete"),
            ]
        }
    )
    (upload,) = sub.parse_notification(body).uploads
    assert upload == sub.MarkerUpload("b", "submissions/my run+1/submit", "AWS:AROA1:alice")


def test_the_test_event_announces_nothing():
    body = json.dumps({"Service": "Amazon S3", "Event": "s3:TestEvent", "Bucket": "b"})
    assert sub.parse_notification(body).uploads == ()


@pytest.mark.parametrize(
    "body", ["{not json", "[1]", '{"hello": 1}', '{"Records": [{"eventName": "ObjectCreated:Put"}]}']
)
def test_a_body_that_is_no_s3_notification_is_an_invalid_message(body: str):
    with pytest.raises(InvalidMessageError):
        sub.parse_notification(body)


@pytest.mark.parametrize(
    ("principal", "owner"),
    [
        ("AWS:AROAEXAMPLE:alice@example.com", "alice@example.com"),
        ("AWS:AIDAEXAMPLE", "AIDAEXAMPLE"),
        ("A3NL1KOZZKEXAMPLE", "A3NL1KOZZKEXAMPLE"),
        (None, "user"),
    ],
)
def test_the_uploader_is_the_owner(principal: str | None, owner: str):
    assert sub.owner_from_principal(principal) == owner


def test_the_digest_is_the_name_the_config_and_the_context():
    one = sub.submission_digest("a", CONFIG, "c" * 64)
    assert one == sub.submission_digest("a", CONFIG, "c" * 64) and keys.is_sha256(one)
    assert one != sub.submission_digest("b", CONFIG, "c" * 64)
    assert one != sub.submission_digest("a", CONFIG + b"\n", "c" * 64)
    assert one != sub.submission_digest("a", CONFIG, "d" * 64)


# ---- archives ---------------------------------------------------------------------------------------


def test_an_archive_as_det_packs_it_passes_with_its_content_address(tmp_path: Path):
    (tmp_path / "train.py").write_text("print('hi')\n")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "util.py").write_text("X = 1\n")
    data = archive_bytes(collect(tmp_path))
    checked = context_archives.check_archive(io.BytesIO(data))
    assert checked.size == len(data) and checked.members == 2
    assert checked.sha256 == __import__("hashlib").sha256(data).hexdigest()


@pytest.mark.parametrize(
    ("member", "says"),
    [
        (("../evil.py", b"x"), "escapes its folder"),
        (("/etc/evil", b"x"), "escapes its folder"),
        (("a/../../evil", b"x"), "escapes its folder"),
        (("out", "../../etc/passwd", tarfile.SYMTYPE), "outside its folder"),
        (("abs", "/etc/passwd", tarfile.SYMTYPE), "outside its folder"),
        (("hard", "/etc/passwd", tarfile.LNKTYPE), "not an earlier file"),
    ],
)
def test_a_member_escaping_its_folder_refuses_the_archive(member, says: str, tar_zst, tar_link):
    built = tar_link(*member) if len(member) == 3 else member
    with pytest.raises(context_archives.UnsafeContextError, match=says):
        context_archives.check_archive(io.BytesIO(tar_zst(("ok.py", b"1"), built)))


def test_nothing_may_be_written_through_a_link_of_the_archive(tar_zst, tar_link):
    data = tar_zst(tar_link("d", "."), ("d/x", b"1"))
    with pytest.raises(context_archives.UnsafeContextError, match="below a symlink"):
        context_archives.check_archive(io.BytesIO(data))


def test_not_an_archive_is_refused():
    with pytest.raises(context_archives.UnsafeContextError, match="not zstd"):
        context_archives.check_archive(io.BytesIO(b"PK\x03\x04 a zip"))


def test_plain_files_pack_to_the_same_bytes_every_time_and_unpack_as_they_were(tmp_path: Path):
    blobs = {"train.py": b"print(1)\n", "lib/u.py": b"U = 2\n"}

    def files() -> list[context_archives.PlainFile]:
        return [context_archives.PlainFile(n, len(b), lambda b=b: io.BytesIO(b)) for n, b in blobs.items()]

    first, checked = context_archives.pack_files(files())
    data = first.read()
    again, checked_again = context_archives.pack_files(list(reversed(files())))
    assert again.read() == data and checked_again == checked
    assert context_archives.check_archive(io.BytesIO(data)).sha256 == checked.sha256
    assert sorted(extract(data, tmp_path / "out")) == ["lib/u.py", "train.py"]
    assert (tmp_path / "out" / "lib" / "u.py").read_bytes() == b"U = 2\n"


# ---- the use case on the in-memory ports ------------------------------------------------------------


@pytest.fixture
def world():  # noqa: ANN201
    ports = memory_ports()
    return ports, MemorySubmissionFiles(ports.blobs)


def _drop(files: MemorySubmissionFiles, name: str, objects: dict[str, bytes]) -> sub.MarkerUpload:
    for relative, data in objects.items():
        files.blobs.put(f"submissions/{name}/{relative}", data)
    files.blobs.put(f"submissions/{name}/submit", b"")
    return sub.MarkerUpload(files.blobs.bucket, f"submissions/{name}/submit", "AWS:AROA1:alice")


def _status(files: MemorySubmissionFiles, name: str) -> dict:
    return json.loads(files.blobs.objects[f"submissions/{name}/status.json"])


def test_a_submission_of_plain_files_creates_its_experiment_once(world):
    ports, files = world
    upload = _drop(files, "one", {"config.yaml": CONFIG, "train.py": b"print(1)\n"})
    first = submissions.submit(ports, files, upload)
    assert submissions.submit(ports, files, upload) == first  # a duplicate: the same bytes again
    status = _status(files, "one")
    assert status["status"] == "created" and status["submission"] == "one"
    assert list(ports.experiments.items) == [status["experiment_id"]]
    experiment = ports.experiments.get(status["experiment_id"])
    assert experiment is not None and experiment.context_sha256 is not None
    assert experiment.owner == "alice"
    assert experiment.name == "one"  # a config without a name is named after its folder
    assert ports.blobs.exists(keys.context_key(experiment.context_sha256))
    assert not files.blobs.keys_under("uploads/")  # staged, verified, promoted


def test_a_bad_config_is_refused_with_every_problem_and_creates_nothing(world):
    ports, files = world
    config = b"entrypoint: python3 train.py\nsearcher: {name: single, max_length: {batches: -1}}\nmax_restarts: x\n"
    submissions.submit(ports, files, _drop(files, "bad", {"config.yaml": config, "train.py": b"1"}))
    status = _status(files, "bad")
    assert status["status"] == "refused"
    paths = {p["path"] for p in status["problems"]}
    assert {"searcher.metric", "max_restarts"} <= paths, status
    assert not ports.experiments.items and not files.blobs.keys_under("contexts/")


def test_a_missing_config_and_an_escaping_archive_are_both_reported(world, tar_zst):
    ports, files = world
    upload = _drop(files, "evil", {"context.tar.zst": tar_zst(("../x", b"1"))})
    submissions.submit(ports, files, upload)
    problems = {p["path"]: p["message"] for p in _status(files, "evil")["problems"]}
    assert "is missing" in problems["config.yaml"] and "escapes its folder" in problems["context.tar.zst"]
    assert not ports.experiments.items


def test_an_invalid_name_is_answered_beside_its_marker(world):
    ports, files = world
    files.blobs.put("submissions/my run/submit", b"")
    submissions.submit(ports, files, sub.MarkerUpload(files.blobs.bucket, "submissions/my run/submit"))
    assert "letters, digits" in _status(files, "my run")["problems"][0]["message"]


def test_a_delivery_that_stopped_before_the_searcher_is_carried_on_by_the_next(world, monkeypatch):
    ports, files = world
    upload = _drop(files, "half", {"config.yaml": CONFIG, "train.py": b"print(1)\n"})

    def stops(*_: object) -> None:
        raise RuntimeError("the Lambda timed out here")

    with monkeypatch.context() as patched:
        patched.setattr(submissions.searching, "start", stops)
        with pytest.raises(RuntimeError):
            submissions.submit(ports, files, upload)
    (experiment_id,) = ports.experiments.items
    assert not ports.experiments.get(experiment_id).searcher_started
    submissions.submit(ports, files, upload)  # SQS delivers the message again
    assert list(ports.experiments.items) == [experiment_id]
    assert ports.experiments.get(experiment_id).searcher_started
    assert ports.trials.for_experiment(experiment_id)
