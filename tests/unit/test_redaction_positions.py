"""Structure before looks: a credential in a credential position is redacted whatever it looks like.

URL and connection-string passwords, `Authorization` values, `curl -u`, `--password` flags and
private key blocks are secrets by where they sit; only a visible reference or placeholder
(`${VAR}`, `%s`, `{name}`, `<password>`, `****`, an empty value) is left alone. Sample values are
made up for these tests.
"""

from __future__ import annotations

import pytest

from worker.redaction import Redactor

R = Redactor(b"k" * 32)

OKTA = "00TKn_S7eMwDoX1yaHK0vsWAGFpbQniqChFMEaGppe"
NRAK = "NRAK-IIG2DM6KQB6DJP29G0MFMTHAB9R"
HEX40 = "0abdb0b1ee0ba0e34343d27d08254f6fff4f0ba4"
SONAR_HEX = "68356d9d4b6d9b0b48703d62f37d5c93c7e5269a"
UNSEAL = "Kh/j6ScGuolkviU5lehe6+nyqRDVM6ZNQfDxzxkWdf8="
THINGSBOARD = "2WZbjr5xr6otPHhjdokg"
TELEGRAM = "700080279:AAKbGPy_5cTVljlmo0FRaEeLvAlUU8r8nYN"
RANDOM = "rFVCHz3vWhQdBKMusSylh2p2"
BASIC = "ZGVwbG95OldxN3RSejJwTGs="
KEY_BODY = "MIIEowIBAAKCAQEAx4Tg7pQm9dK2vLr8sY3nQ5wZ"

# (id, text, secret, parts that must survive)
POSITIVES = [
    (
        "postgres-plain-word",
        "postgres://user:password@host/db",
        "password@host",
        ("postgres://user:", "@host/db"),
    ),
    ("postgres-hunter2", "DATABASE_URL=postgres://app:hunter2@db:5432/app", "hunter2", ("app:", "@db:5432")),
    (
        "postgresql-psycopg2",
        "postgresql+psycopg2://svc:password123@10.0.0.5/orders",
        "password123",
        ("postgresql+psycopg2://svc:", "@10.0.0.5/orders"),
    ),
    ("mysql", "mysql://root:toor@localhost:3306/shop", "toor", ("mysql://root:", "@localhost")),
    (
        "mongodb",
        "mongodb://admin:letmein@mongo-0.example:27017/?authSource=admin",
        "letmein",
        ("mongodb://admin:", "@mongo-0.example"),
    ),
    (
        "mongodb-srv-percent",
        "mongodb+srv://reporter:S3cr%40t%21pw@cluster0.ab1cd.mongodb.net/test",
        "S3cr%40t%21pw",
        ("mongodb+srv://reporter:", "@cluster0.ab1cd.mongodb.net/test"),
    ),
    (
        "mongodb-srv-random",
        f"mongodb+srv://etl:{RANDOM}@cluster1.zz9yy.mongodb.net",
        RANDOM,
        ("mongodb+srv://etl:", "@cluster1"),
    ),
    ("amqp", "amqp://guest:guest@rabbit:5672/", "guest@", ("amqp://guest:", "@rabbit")),
    ("redis-no-user", "redis://:abc@cache:6379/0", "abc", ("redis://:", "@cache:6379/0")),
    ("smtp", "smtp://mailer:sunshine@smtp.example.com:587", "sunshine", ("smtp://mailer:", "@smtp")),
    ("ftp", "ftp://anon:qwerty@files.example.org/pub", "qwerty", ("ftp://anon:", "@files.example.org")),
    (
        "https-userinfo",
        "https://bob:pw@git.example.com/repo.git",
        ":pw@",
        ("https://bob:", "@git.example.com"),
    ),
    ("password-holding-at", "postgres://u:p@ss@db.example/app", "p@ss", ("postgres://u:", "@db.example/app")),
    (
        "jdbc-query-password",
        "jdbc:postgresql://db.example:5432/app?user=app&password=secret",
        "secret",
        ("jdbc:postgresql://db.example:5432/app?user=app&password=",),
    ),
    (
        "jdbc-sqlserver",
        "jdbc:sqlserver://sql1:1433;databaseName=hr;user=sa;password=dragon;",
        "dragon",
        ("user=sa;password=",),
    ),
    (
        "govc-url",
        "export GOVC_URL=https://administrator@vsphere.local:VMware1!@vcenter.example/sdk",
        "VMware1!",
        ("GOVC_URL=https://administrator@vsphere.local:", "@vcenter.example/sdk"),
    ),
    ("govc-password", "export GOVC_PASSWORD=vmware", "vmware", ("GOVC_PASSWORD=",)),
    ("authorization-basic", f"Authorization: Basic {BASIC}", BASIC, ("Authorization: Basic ",)),
    ("authorization-bearer-word", "Authorization: Bearer letmein", "letmein", ("Authorization: Bearer ",)),
    ("authorization-ssws", f"Authorization: SSWS {OKTA}", OKTA, ("Authorization: SSWS ",)),
    (
        "authorization-ssws-curl",
        f'curl -H "Accept: application/json" -H "Authorization: SSWS {OKTA}" https://acme.okta.com/api/v1/users',
        OKTA,
        ('"Authorization: SSWS ', "https://acme.okta.com/api/v1/users"),
    ),
    ("authorization-token", "Authorization: Token abc123", "abc123", ("Authorization: Token ",)),
    ("authorization-unknown-scheme", "Authorization: Custom Zk29-aQ", "Zk29-aQ", ("Authorization: Custom ",)),
    (
        "authorization-json",
        '{"headers": {"Authorization": "Bearer hunter2"}}',
        "hunter2",
        ('"Authorization": "Bearer ',),
    ),
    (
        "authorization-http-dump",
        "GET /v2/items HTTP/1.1\r\nHost: api.example\r\nauthorization: token sesame42\r\n\r\n",
        "sesame42",
        ("Host: api.example", "authorization: token "),
    ),
    ("okta-assignment", f"OKTA_API_TOKEN={OKTA}", OKTA, ("OKTA_API_TOKEN=",)),
    ("okta-yaml", f"okta:\n  client:\n    token: {OKTA}\n", OKTA, ("token: ",)),
    ("newrelic-nrak", f"NEW_RELIC_API_KEY={NRAK}", NRAK, ("NEW_RELIC_API_KEY=",)),
    ("newrelic-nrak-prose", f"use key {NRAK} for the API", NRAK, ("use key ", " for the API")),
    ("github-secret-hex", f"GITHUB_SECRET={HEX40}", HEX40, ("GITHUB_SECRET=",)),
    ("vault-unseal", f"Unseal Key 1: {UNSEAL}\nUnseal Key 2: {UNSEAL[::-1]}", UNSEAL, ("Unseal Key 1: ",)),
    ("vault-unseal-command", f"vault operator unseal {UNSEAL}", UNSEAL, ("vault operator unseal ",)),
    (
        "thingsboard",
        f"curl -v -X POST http://tb.local:8080/api/v1/{THINGSBOARD}/telemetry -d '{{\"t\": 21}}'",
        THINGSBOARD,
        ("http://tb.local:8080/api/v1/", "/telemetry"),
    ),
    ("telegram", f"TELEGRAM_BOT_TOKEN={TELEGRAM}", TELEGRAM, ("TELEGRAM_BOT_TOKEN=",)),
    (
        "telegram-in-url",
        f"https://api.telegram.org/bot{TELEGRAM}/sendMessage",
        TELEGRAM,
        ("https://api.telegram.org/bot", "/sendMessage"),
    ),
    ("sonar-squ", f"SONAR_TOKEN=squ_{SONAR_HEX}", SONAR_HEX, ("SONAR_TOKEN=",)),
    ("sonar-sqp", f"token sqp_{SONAR_HEX} expires", SONAR_HEX, ("token ", " expires")),
    ("sonar-login", f"mvn sonar:sonar -Dsonar.login={SONAR_HEX}", SONAR_HEX, ("-Dsonar.login=",)),
    (
        "ado-spaces",
        "Server=sql1;Database=hr;User Id=sa;Password = hunter2;",
        "hunter2",
        ("User Id=sa;Password = ",),
    ),
    (
        "ado-password-first",
        "Password=sunshine;User ID=app;Data Source=db01",
        "sunshine",
        ("Password=", ";User ID=app;Data Source=db01"),
    ),
    ("ado-quoted", "Data Source=db;User ID=app;Password='pa;ss';", "pa;ss", ("User ID=app;Password=",)),
    ("odbc-braced", "Driver={ODBC Driver 18};Server=db;Uid=app;PWD={p;w}}d1};", "p;w}}d1", ("Uid=app;PWD=",)),
    ("gradle-proxy", "systemProp.https.proxyPassword=tiger", "tiger", ("systemProp.https.proxyPassword=",)),
    ("gradle-signing", "signing.keyId=24875D73\nsigning.password=secret\n", "secret", ("signing.password=",)),
    ("gradle-maven", "mavenUser=deployer\nmavenPassword=deploy\n", "deploy\n", ("mavenPassword=",)),
    ("phpmailer", "$mail->Password = 'secret';", "secret", ("$mail->Password = '",)),
    (
        "curl-u",
        "curl -u admin:hunter2 https://ci.example/api",
        "hunter2",
        ("curl -u admin:", "https://ci.example"),
    ),
    ("curl-user-quoted", "curl --user 'deploy:pw' https://x.example", "pw'", ("curl --user 'deploy:",)),
    ("curl-user-equals", "curl --user=ops:letmein https://x.example", "letmein", ("curl --user=ops:",)),
    ("password-flag", "mysqldump --password secret shop", "secret", ("mysqldump --password ", " shop")),
    ("password-flag-equals", "psql --password=password123 -h db", "password123", ("--password=", " -h db")),
    ("mysql-attached-p", "mysql -u root -psecret123 shop", "secret123", ("mysql -u root -p",)),
    # a flag at the start of a quoted string or of a URL's value (`?args=--token%20x`)
    (
        "flag-in-json-string",
        '{"args": "--api-token Zq81rTb0x7MwLp2c"}',
        "Zq81rTb0x7MwLp2c",
        ('{"args": "--api-token ',),
    ),
    (
        "flag-in-query",
        "https://ci.example/run?args=--api-token%20Zq81rTb0x7MwLp2c",
        "Zq81rTb0x7MwLp2c",
        ("?args=--api-token%20",),
    ),
    (
        "private-key-truncated",
        f"-----BEGIN RSA PRIVATE KEY-----\n{KEY_BODY}",
        KEY_BODY,
        (),
    ),
    (
        "private-key-json-escaped",
        f'{{"key": "-----BEGIN OPENSSH PRIVATE KEY-----\\n{KEY_BODY}\\n-----END OPENSSH PRIVATE KEY-----\\n"}}',
        KEY_BODY,
        ('{"key": ',),
    ),
    (
        "jaas-user-list",
        "KafkaServer {\n  org.apache.kafka.common.security.plain.PlainLoginModule required\n"
        '  username="broker"\n  password="Br0ker-Plain-71"\n  user_analytics="An4lytics-Qx9";\n};',
        "An4lytics-Qx9",
        ('user_analytics="', 'username="broker"'),
    ),
    (
        "shiro-users-section",
        "[main]\nauthc.loginUrl = /login.jsp\n[users]\nadmin = Shiro-Adm1n-Pw, admin\nops = Qx2!vR9m, ops, audit\n[roles]\n",
        "Shiro-Adm1n-Pw",
        ("[users]", ", admin", "[roles]"),
    ),
    (
        "secret-string-data-identifiers-kept",
        "kind: Secret\nstringData:\n  url: https://git.example/r\n  username: deploy\n"
        '  insecure: "true"\n  password: Gh-Repo-Pw-8812 # the token\n',
        "Gh-Repo-Pw-8812",
        ("url: https://git.example/r", "username: deploy", 'insecure: "true"', "# the token"),
    ),
]

NEAR_MISSES = [
    (
        "users-section-settings",
        "[users]\nallow_sign_up = false\nhidden_users = admin, other\ndefault_theme = dark\n",
    ),
    ("user-option-without-login-module", 'user_id = "u-1234"  # a user option of some other config'),
    ("url-user-only", "git clone https://user@host.example/org/repo.git"),
    ("url-port", "curl http://host:8080/path"),
    ("url-placeholder-var", "postgres://app:${DB_PASSWORD}@db:5432/app"),
    ("url-placeholder-dollar", "redis://:$REDIS_PASS@cache:6379"),
    ("url-placeholder-format", 'dsn = "mysql://%s:%s@%s/%s" % (u, p, h, d)'),
    ("url-placeholder-pyformat", "postgres://%(user)s:%(password)s@%(host)s/db"),
    ("url-placeholder-braces", 'f"postgresql://{user}:{password}@{host}/{name}"'),
    ("url-placeholder-jinja", "amqp://{{ rabbit_user }}:{{ rabbit_pass }}@rabbit/"),
    ("url-placeholder-angle", "mongodb+srv://<username>:<password>@cluster0.example.mongodb.net"),
    ("url-placeholder-stars", "postgres://admin:****@db/app"),
    ("url-placeholder-xs", "postgres://admin:xxxxxxxx@db/app"),
    ("git-remote", "git remote add origin git@github.com:org/repo.git"),
    ("ssh-url", "ssh://git@gitlab.example:2222/org/repo.git"),
    ("bearer-var", "Authorization: Bearer ${TOKEN}"),
    ("bearer-var-curl", 'curl -H "Authorization: Bearer $API_TOKEN" https://api.example'),
    ("bearer-angle", "Authorization: Bearer <token>"),
    ("bearer-angle-words", 'curl -H "Authorization: Bearer <Acme API token>" https://api.example'),
    ("curl-user-positional", 'curl -sL --user "$1:$2" "$3"'),
    ("curl-user-mask", 'curl --user "nnn:zzz" https://api.example'),
    ("bearer-concatenation", 'headers = {"Authorization": "Bearer " + token}'),
    ("bearer-fstring", 'headers = {"Authorization": f"Bearer {token}"}'),
    ("bearer-template-literal", "headers: { Authorization: `Bearer ${accessToken}` }"),
    ("authorization-prose", "The Authorization: header must be present on every call."),
    ("prose-password", "Enter your password when prompted, then set a new password."),
    ("prose-password-flag", "Pass the --password flag to be prompted for it."),
    ("quoted-help-flag", 'echo "--help text" and "--token-file path"'),
    ("password-flag-var", 'mysql --password="$DB_PASS" -h db'),
    ("password-flag-metavar", "  -p PASSWORD, --password PASSWORD   database password"),
    ("password-file-flag", "docker login --password-stdin registry.example.com"),
    ("password-flag-then-flag", "pg_dump --password -h db.example shop"),
    ("curl-u-vars", 'curl -u "$USER:$PASS" https://x.example'),
    ("docker-uid-gid", "docker run -u 1000:1000 alpine id"),
    ("ado-placeholder", "Server=db;User Id=sa;Password=<password>;"),
    ("ado-concatenation", 'var cs = "Server=db;User Id=sa;Password=" + pw + ";";'),
    ("ado-format", 'cs = "Server=db;Uid=sa;Pwd={0};".format(pw)'),
    ("jdbc-password-var", "jdbc:postgresql://db/app?user=app&password=${PGPASS}"),
    ("gradle-placeholder", "signing.password=${SIGNING_PASSWORD}"),
    ("phpmailer-empty", "$mail->Password = '';"),
    ("phpmailer-var", "$mail->Password = $config['smtp_pass'];"),
    ("thingsboard-placeholder", "http://localhost:8080/api/v1/$ACCESS_TOKEN/telemetry"),
    ("vault-prose", "Unseal Key 1: (printed once at init, store it safely)"),
    ("private-key-header-only", "PEM files begin with -----BEGIN PRIVATE KEY----- and a base64 body."),
    ("private-key-placeholder", "-----BEGIN RSA PRIVATE KEY-----\n...\n-----END RSA PRIVATE KEY-----"),
]


@pytest.mark.parametrize(
    ("text", "secret", "kept"), [c[1:] for c in POSITIVES], ids=[c[0] for c in POSITIVES]
)
def test_credential_position_is_redacted_and_structure_kept(
    text: str, secret: str, kept: tuple[str, ...]
) -> None:
    """A credential in a credential position is replaced; scheme, user, host and key names stay."""
    redacted = R.redact_text(text)
    assert secret not in redacted
    assert "[REDACTED:" in redacted
    for part in kept:
        assert part in redacted


@pytest.mark.parametrize("text", [c[1] for c in NEAR_MISSES], ids=[c[0] for c in NEAR_MISSES])
def test_reference_or_structure_without_a_value_is_untouched(text: str) -> None:
    """References, placeholders and look-alike structures without a credential stay as they are."""
    assert R.redact_text(text) == text
