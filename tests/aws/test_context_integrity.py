"""Context poisoning: no one can place bytes under a context's content address that do not hash to it.

Through the services on the AWS adapters (moto, with the upload a real PUT to the presigned URL) and on
the in-memory twins: an upload under a wrong name is refused at create with nothing stored under that
name and no experiment id spent, and the victim's own upload afterwards is not skipped and runs.
"""

from __future__ import annotations

import base64
import hashlib
from urllib.parse import urlsplit

import httpx
import pytest

from chalicelib.domain import keys
from chalicelib.errors import BadRequestError
from chalicelib.services import contexts, experiments
from chalicelib.services.ports import Ports

pytestmark = pytest.mark.aws

CONFIG = {
    "name": "victim",
    "entrypoint": "python3 train.py",
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}},
}
VICTIM = b"the victim's packed folder"
EVIL = b"import os; os.system('steal the tokens')"
SHA = hashlib.sha256(VICTIM).hexdigest()


def _upload(ports: Ports, offer: contexts.UploadOffer, data: bytes) -> None:
    """What `det` does with the offer: a PUT of the bytes to the URL, with the headers it names."""
    assert offer.url is not None
    if offer.url.startswith("memory://"):
        ports.blobs.put(urlsplit(offer.url).path.lstrip("/"), data)  # type: ignore[attr-defined]
        return
    httpx.put(offer.url, content=data, headers=offer.headers or {}).raise_for_status()


def test_an_upload_under_a_wrong_name_is_refused_and_nothing_is_stored(ports: Ports) -> None:
    attacker = contexts.offer_upload(ports, SHA, len(EVIL))
    assert not attacker.exists and attacker.key == keys.context_key(SHA)
    assert keys.context_upload_prefix(SHA) in (attacker.url or "")  # a staging key, never the address
    _upload(ports, attacker, EVIL)

    with pytest.raises(BadRequestError, match="does not hash to that name"):
        experiments.create(ports, CONFIG, SHA)

    assert not ports.blobs.exists(keys.context_key(SHA))
    assert ports.blobs.keys_under(keys.context_upload_prefix(SHA)) == []  # the bad upload is gone
    # The victim is not told "already uploaded": it uploads its own bytes, and they are the ones run.
    victim = contexts.offer_upload(ports, SHA, len(VICTIM))
    assert not victim.exists
    _upload(ports, victim, VICTIM)
    created = experiments.create(ports, CONFIG, SHA).experiment
    assert created is not None and created.id == 1  # the refused create spent no id
    assert ports.blobs.sha256_of(keys.context_key(SHA)) == (SHA, len(VICTIM))
    assert contexts.offer_upload(ports, SHA, len(VICTIM)).exists  # from now on, skipped


def test_a_good_upload_beside_a_bad_one_wins(ports: Ports) -> None:
    _upload(ports, contexts.offer_upload(ports, SHA, len(EVIL)), EVIL)
    _upload(ports, contexts.offer_upload(ports, SHA, len(VICTIM)), VICTIM)

    experiments.create(ports, CONFIG, SHA)

    assert ports.blobs.sha256_of(keys.context_key(SHA)) == (SHA, len(VICTIM))
    assert ports.blobs.keys_under(keys.context_upload_prefix(SHA)) == []


def test_a_context_never_uploaded_is_a_400_naming_the_fix(ports: Ports) -> None:
    with pytest.raises(BadRequestError, match="upload it through the URL POST /contexts returns"):
        experiments.create(ports, CONFIG, SHA)


def test_an_oversized_context_is_refused_before_any_byte_moves(ports: Ports) -> None:
    with pytest.raises(BadRequestError, match=r"over the limit of 104,857,600"):
        contexts.offer_upload(ports, SHA, contexts.MAX_CONTEXT_BYTES + 1)


def test_the_presigned_put_binds_the_checksum(stack) -> None:  # noqa: ANN001
    """In AWS, S3 itself refuses other bytes on this URL (BadDigest): the signature covers the header
    carrying the SHA-256 (moto does not check it; the create-time hash above covers that)."""
    offer = contexts.offer_upload(stack.ports, SHA, len(VICTIM))
    assert offer.url is not None and "x-amz-checksum-sha256" in offer.url.lower()
    assert offer.headers == {"x-amz-checksum-sha256": base64.b64encode(bytes.fromhex(SHA)).decode()}
