"""OpenID Connect sign-in, played for real: a small provider on 127.0.0.1 (discovery, authorize, token, JWKS,
userinfo, in an http.server thread the test starts) and the authorization code flow with PKCE through
Django's test client. The id_token is signed (RS256 against the JWKS, or HS256 with the client secret) and
checked: signature, nonce, audience, issuer. The provider's groups give the role and the teams."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from django.contrib.auth.models import User
from django.test import Client

from journals import access
from teams.models import Team, TeamPrefix
from tests.console.scenarios import payments_run

pytestmark = pytest.mark.django_db

CLIENT_ID, CLIENT_SECRET = "loopx-test-client", "test-client-secret-0123456789abcdef"


@dataclass
class Provider:
    """What the provider will say about the next person who signs in, and how it signs."""

    base: str = ""
    alg: str = "RS256"
    claims: dict[str, Any] = field(default_factory=dict)
    audience: str = CLIENT_ID
    issuer: str | None = None  # None: its own URL
    sign_with_other_key: bool = False
    codes: dict[str, dict[str, str]] = field(default_factory=dict)
    tokens: dict[str, dict[str, Any]] = field(default_factory=dict)
    token_requests: list[dict[str, str]] = field(default_factory=list)
    key: Any = field(default_factory=lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048))
    other_key: Any = field(default_factory=lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048))

    def id_token(self, nonce: str) -> str:
        now = int(time.time())
        payload = {
            "iss": self.issuer or self.base, "sub": self.claims["sub"], "aud": self.audience,
            "iat": now, "exp": now + 300, "nonce": nonce,
        }  # fmt: skip
        if self.alg == "HS256":
            return jwt.encode(payload, CLIENT_SECRET, algorithm="HS256")
        key = self.other_key if self.sign_with_other_key else self.key
        return jwt.encode(payload, key, algorithm="RS256", headers={"kid": "k1"})


def _handler(provider: Provider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def _json(self, body: Any, status: int = 200) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            if url.path == "/.well-known/openid-configuration":
                self._json({
                    "issuer": provider.base,
                    "authorization_endpoint": f"{provider.base}/authorize",
                    "token_endpoint": f"{provider.base}/token",
                    "userinfo_endpoint": f"{provider.base}/userinfo",
                    "jwks_uri": f"{provider.base}/jwks",
                })  # fmt: skip
            elif url.path == "/authorize":
                # The person is signed in at the provider already: a code for this client, bound to the
                # redirect, the nonce and the PKCE challenge.
                assert query["client_id"] == CLIENT_ID and query["response_type"] == "code"
                code = secrets.token_urlsafe(16)
                provider.codes[code] = query
                self.send_response(302)
                back = urlencode({"code": code, "state": query["state"]})
                self.send_header("Location", f"{query['redirect_uri']}?{back}")
                self.end_headers()
            elif url.path == "/jwks":
                jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(provider.key.public_key()))
                self._json({"keys": [{**jwk, "kid": "k1", "alg": "RS256", "use": "sig"}]})
            elif url.path == "/userinfo":
                bearer = self.headers.get("Authorization", "").removeprefix("Bearer ")
                if bearer not in provider.tokens:
                    self._json({"error": "invalid_token"}, 401)
                else:
                    self._json(provider.tokens[bearer])
            else:
                self._json({"error": "not_found"}, 404)

        def do_POST(self) -> None:
            form = {k: v[0] for k, v in parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode()).items()}
            provider.token_requests.append(form)
            asked = provider.codes.pop(form.get("code", ""), None)
            verifier = form.get("code_verifier", "")
            challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
            if (
                self.path != "/token"
                or asked is None
                or form.get("client_id") != CLIENT_ID
                or form.get("client_secret") != CLIENT_SECRET
                or form.get("redirect_uri") != asked["redirect_uri"]
                or asked.get("code_challenge") != challenge
            ):
                self._json({"error": "invalid_grant"}, 400)
                return
            access_token = secrets.token_urlsafe(16)
            provider.tokens[access_token] = dict(provider.claims)
            id_token = provider.id_token(asked["nonce"])
            self._json({"access_token": access_token, "token_type": "Bearer", "id_token": id_token})

    return Handler


@pytest.fixture
def provider(monkeypatch) -> Iterator[Provider]:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")  # requests must reach the loopback provider directly
    state = Provider()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    state.base = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture
def sso(settings, provider) -> Provider:
    settings.LOOPX_OIDC_ENABLED = True
    settings.OIDC_RP_CLIENT_ID, settings.OIDC_RP_CLIENT_SECRET = CLIENT_ID, CLIENT_SECRET
    settings.OIDC_OP_DISCOVERY_URL = f"{provider.base}/.well-known/openid-configuration"
    settings.LOOPX_OIDC_PROVIDER_NAME = "Acme ID"
    settings.LOOPX_OIDC_GROUPS_VIEWER = ["loopx-viewers"]
    settings.LOOPX_OIDC_GROUPS_OPERATOR = ["loopx-operators", "sre"]
    settings.LOOPX_OIDC_GROUPS_ADMIN = ["loopx-admins"]
    settings.AUTHENTICATION_BACKENDS = ["loopx_site.oidc.LoopxOIDCBackend", "django.contrib.auth.backends.ModelBackend"]
    provider.claims = {
        "sub": "acme-123", "preferred_username": "bea@acme.test", "email": "bea@acme.test",
        "given_name": "Bea", "family_name": "Blue", "groups": ["loopx-operators", "acme-blue"],
    }  # fmt: skip
    team = Team.objects.create(name="blue", oidc_group="acme-blue")
    TeamPrefix.objects.create(team=team, prefix="blue-")
    return provider


def sign_in(client: Client, provider: Provider) -> Any:
    """The whole exchange: our sign-in view, the provider's authorize, our callback (which calls the
    provider's token, JWKS and userinfo endpoints itself)."""
    import urllib.error
    import urllib.request

    start = client.get("/oidc/authenticate/?next=/runs/")
    assert start.status_code == 302 and start["Location"].startswith(f"{provider.base}/authorize?")
    asked = {k: v[0] for k, v in parse_qs(urlsplit(start["Location"]).query).items()}
    assert asked["code_challenge_method"] == "S256" and asked["nonce"] and asked["state"]

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any) -> None:
            return None

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), NoRedirect)
    try:
        opener.open(start["Location"])
        raise AssertionError("the provider did not redirect back")
    except urllib.error.HTTPError as redirect:  # the provider's 302, kept from being followed
        back = redirect.headers["Location"]
    assert back.startswith("http://testserver/oidc/callback/?")
    return client.get(back.removeprefix("http://testserver"))


def test_sign_in_creates_the_person_with_role_and_team(sso):
    blue, red = payments_run("blue-pay").run, payments_run("red-pay").run
    client = Client()
    answer = sign_in(client, sso)
    assert answer.status_code == 302 and answer["Location"] == "/runs/"
    user = User.objects.get(username="bea@acme.test")
    assert (user.email, user.first_name, user.last_name) == ("bea@acme.test", "Bea", "Blue")
    assert not user.has_usable_password()
    assert access.role_of(User.objects.get(pk=user.pk)) == access.OPERATOR
    assert list(user.loopx_teams.values_list("name", flat=True)) == ["blue"]
    # Signed in: the team's runs, and no other.
    runs = client.get("/api/v1/runs").json()["results"]
    assert [r["run_id"] for r in runs] == [blue.run_id]
    assert client.get(f"/api/v1/runs/{red.run_id}").status_code == 404
    # The code flow as the provider saw it: the code once, with the PKCE verifier and the client's secret.
    (grant,) = sso.token_requests
    assert grant["grant_type"] == "authorization_code" and grant["code_verifier"]


def test_the_next_sign_in_follows_the_providers_groups(sso):
    sign_in(Client(), sso)
    sso.claims = {**sso.claims, "groups": ["loopx-viewers"]}  # left the operators and the blue team
    client = Client()
    assert sign_in(client, sso).status_code == 302
    user = User.objects.get(username="bea@acme.test")
    assert access.role_of(user) == access.VIEWER
    assert not user.loopx_teams.exists()
    assert client.get("/api/v1/runs").json()["results"] == []  # no team: no run (fail closed)
    sso.claims = {**sso.claims, "groups": ["sre", "loopx-admins"]}
    sign_in(Client(), sso)
    assert access.role_of(User.objects.get(pk=user.pk)) == access.ADMIN  # the highest mapped role


def test_no_mapped_group_gives_no_role(sso):
    sso.claims = {**sso.claims, "groups": ["marketing"]}
    client = Client()
    sign_in(client, sso)
    assert access.role_of(User.objects.get(username="bea@acme.test")) is None
    assert client.get("/").status_code == 403


@pytest.mark.parametrize(
    "spoil",
    [
        pytest.param(lambda p: setattr(p, "sign_with_other_key", True), id="signed-by-another-key"),
        pytest.param(lambda p: setattr(p, "audience", "another-client"), id="for-another-client"),
        pytest.param(lambda p: setattr(p, "issuer", "https://elsewhere.test"), id="from-another-issuer"),
    ],
)
def test_a_bad_id_token_signs_nobody_in(sso, spoil):
    spoil(sso)
    client = Client()
    answer = sign_in(client, sso)
    assert answer.status_code == 302 and answer["Location"] == "/accounts/login/?sso=failed"
    assert not User.objects.filter(username="bea@acme.test").exists()
    assert client.get("/api/v1/runs").status_code == 401  # not signed in
    page = client.get("/accounts/login/?sso=failed").content.decode()
    assert "Signing in with Acme ID did not succeed" in page


def test_hs256_signed_with_the_client_secret(sso, settings):
    settings.OIDC_RP_SIGN_ALGO = sso.alg = "HS256"
    assert sign_in(Client(), sso).status_code == 302
    assert User.objects.filter(username="bea@acme.test").exists()


def test_a_local_account_is_never_taken_over(sso):
    User.objects.create_user("bea@acme.test", password="a-local-password-123")
    client = Client()
    assert sign_in(client, sso)["Location"] == "/accounts/login/?sso=failed"
    assert client.get("/api/v1/runs").status_code == 401


def test_the_login_page_offers_the_provider_when_configured(sso, client):
    page = client.get("/accounts/login/").content.decode()
    assert "Sign in with Acme ID" in page and 'href="/oidc/authenticate/' in page


def test_without_configuration_only_local_accounts(client):
    """`make run`'s default: no OIDC_* variables, no button, and the sign-in URLs answer 404."""
    page = client.get("/accounts/login/").content.decode()
    assert "Sign in with" not in page and 'name="password"' in page
    assert client.get("/oidc/authenticate/").status_code == 404
    assert client.get("/oidc/callback/?code=x&state=y").status_code == 404
