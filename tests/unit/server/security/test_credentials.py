import stat

import pytest
import scramp

from server.security.credentials import CredentialStore, ScramCredential


def test_scram_credential_keeps_no_password_and_checks_one() -> None:
    cred = ScramCredential.from_password("s3cret")
    assert b"s3cret" not in cred.salt + cred.stored_key + cred.server_key
    assert cred.iterations == 4096
    assert cred.matches_password("s3cret")
    assert not cred.matches_password("S3cret")


def test_iterations_below_kafkas_minimum_are_refused() -> None:
    with pytest.raises(ValueError, match="iterations"):
        ScramCredential.from_password("pw", iterations=100)


def test_a_full_scram_exchange_authenticates_against_the_stored_credential() -> None:
    store = CredentialStore()
    store.put("alice", ScramCredential.from_password("pw-a"))
    mech = scramp.ScramMechanism("SCRAM-SHA-256")

    def lookup(user: str) -> tuple[bytes, bytes, bytes, int]:
        cred = store.get(user)
        assert cred is not None
        return cred.auth_info()

    for password, ok in (("pw-a", True), ("wrong", False)):
        client = scramp.ScramClient(["SCRAM-SHA-256"], "alice", password)
        server = mech.make_server(lookup)
        server.set_client_first(client.get_client_first())
        client.set_server_first(server.get_server_first())
        if ok:
            server.set_client_final(client.get_client_final())
            client.set_server_final(server.get_server_final())
        else:
            with pytest.raises(scramp.ScramException):
                server.set_client_final(client.get_client_final())


def test_store_round_trips_through_a_0600_file(tmp_path) -> None:
    store = CredentialStore()
    store.put("alice", ScramCredential.from_password("a"))
    store.put("broker", ScramCredential.from_password("b"))
    path = tmp_path / "sec" / "credentials.json"
    store.save(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    loaded = CredentialStore.load(path)
    assert [u for u, _m, _c in loaded.users()] == ["alice", "broker"]
    alice = loaded.get("alice")
    assert alice is not None and alice.matches_password("a")
    assert loaded.remove("alice") and not loaded.remove("alice")
    assert CredentialStore.load(tmp_path / "missing.json").get("broker") is None
