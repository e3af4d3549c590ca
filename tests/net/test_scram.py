"""SCRAM-SHA-256 exchanges, byte for byte (RFC 7677's example), and the ways they must fail."""
from __future__ import annotations

import base64

import pytest

from minibroker.net.scram import ClientStep, ScramClient, ScramCredential, ScramError, ScramServer, ServerStep

# RFC 7677 section 3.
USER, PASSWORD = "user", "pencil"
CNONCE, SNONCE = "rOprNGfwEbeRWgbNEkqO", "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def _credential(password: str = PASSWORD) -> ScramCredential:
    return ScramCredential.derive(password, SALT, 4096)


def test_client_produces_rfc7677_messages_and_accepts_the_server_signature():
    c = ScramClient(USER, PASSWORD, CNONCE)
    assert c.first_message() == CLIENT_FIRST
    assert c.final_message(SERVER_FIRST) == CLIENT_FINAL
    c.verify_server_final(SERVER_FINAL)
    assert c.step is ClientStep.DONE


def test_server_produces_rfc7677_messages_and_names_the_user():
    s = ScramServer(_credential(), SNONCE)
    assert s.server_first(CLIENT_FIRST) == SERVER_FIRST
    assert s.user is None
    assert s.server_final(CLIENT_FINAL) == SERVER_FINAL
    assert s.user == USER and s.step is ServerStep.DONE


def test_the_server_credential_does_not_hold_the_password_or_the_client_key():
    cred = _credential()
    assert PASSWORD.encode() not in cred.stored_key + cred.server_key
    # The client proof cannot be computed from StoredKey alone: a leaked credential is not a login.
    c = ScramClient(USER, "wrong", CNONCE)
    c.first_message()
    s = ScramServer(cred, SNONCE)
    s.server_first(CLIENT_FIRST)
    with pytest.raises(ScramError, match="invalid proof"):
        s.server_final(c.final_message(SERVER_FIRST))


def test_a_wrong_password_is_refused_and_the_exchange_stays_failed():
    s = ScramServer(_credential("the-real-secret"), SNONCE)
    s.server_first(CLIENT_FIRST)
    with pytest.raises(ScramError, match="invalid proof"):
        s.server_final(CLIENT_FINAL)
    assert s.step is ServerStep.FAILED and s.user is None
    with pytest.raises(ScramError):
        s.server_final(CLIENT_FINAL)


def test_a_recorded_exchange_replayed_against_a_new_server_nonce_is_refused():
    s = ScramServer(_credential(), "another-server-nonce")
    s.server_first(CLIENT_FIRST)
    with pytest.raises(ScramError, match="nonce"):
        s.server_final(CLIENT_FINAL)
    assert s.user is None


def test_a_proof_with_the_right_nonce_but_tampered_bytes_is_refused():
    s = ScramServer(_credential(), SNONCE)
    s.server_first(CLIENT_FIRST)
    tampered = CLIENT_FINAL[:-6] + b"AAAAA="
    with pytest.raises(ScramError):
        s.server_final(tampered)


def test_the_client_rejects_a_server_that_does_not_hold_the_credential():
    c = ScramClient(USER, PASSWORD, CNONCE)
    c.first_message()
    c.final_message(SERVER_FIRST)
    with pytest.raises(ScramError, match="server signature"):
        c.verify_server_final(b"v=" + base64.b64encode(b"\0" * 32))


def test_the_client_refuses_weak_iterations_and_foreign_nonces():
    c = ScramClient(USER, PASSWORD, CNONCE)
    c.first_message()
    with pytest.raises(ScramError, match="iterations"):
        c.final_message(b"r=" + CNONCE.encode() + b"x,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=1")
    c = ScramClient(USER, PASSWORD, CNONCE)
    c.first_message()
    with pytest.raises(ScramError, match="nonce"):
        c.final_message(b"r=somebody-else,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")


@pytest.mark.parametrize("first", [b"", b"p=tls-unique,,n=user,r=abc", b"n,,r=abc", b"n,,n=user,r=abc,x=1",
                                   b"\xff\xfe", b"n,,n=us=er,r=abc"])
def test_malformed_client_first_messages_fail_cleanly(first):
    s = ScramServer(_credential(), SNONCE)
    with pytest.raises(ScramError):
        s.server_first(first)
    assert s.step is ServerStep.FAILED


def test_steps_out_of_order_fail():
    s = ScramServer(_credential(), SNONCE)
    with pytest.raises(ScramError, match="out of order"):
        s.server_final(CLIENT_FINAL)
    c = ScramClient(USER, PASSWORD, CNONCE)
    with pytest.raises(ScramError, match="out of order"):
        c.final_message(SERVER_FIRST)


def test_user_names_with_commas_and_equals_round_trip():
    cred = _credential()
    c = ScramClient("a,b=c", PASSWORD, CNONCE)
    s = ScramServer(cred, SNONCE)
    c.verify_server_final(s.server_final(c.final_message(s.server_first(c.first_message()))))
    assert s.user == "a,b=c"


def test_a_server_without_a_credential_refuses_everyone():
    s = ScramServer(None, SNONCE)
    with pytest.raises(ScramError, match="no credential"):
        s.server_first(CLIENT_FIRST)
