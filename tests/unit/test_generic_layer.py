"""The generic layer (worker/redaction/generic/): credentials by structure and shape, no format or vendor known."""

from __future__ import annotations

import base64
import json
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.redaction import Redactor
from worker.redaction.configs.names import spared
from worker.redaction.generic.names import credential_name
from worker.redaction.scanner import CONFIG_POSITIONS, Ruleset
from worker.redaction.shapes import has_template

R = Redactor(b"generic-key")
# the generic layer alone beneath the detectors: no config position knows these formats
NO_FORMATS = Redactor(b"generic-key", Ruleset.without(frozenset({CONFIG_POSITIONS})))

# (case, text, secret): the secret must be gone, and the rest of the text kept
CAUGHT = [
    ("snmp-trap-host", "snmp-server host 10.1.2.4 version 2c Tr4p-Sink!c2", "Tr4p-Sink!c2"),
    ("snmp-trap-host-quoted", 'snmp host 192.168.0.1 enable version 2c "Rack19-mon1tor"', "Rack19-mon1tor"),
    (
        "snmp-both-secrets",
        'createUser ops SHA "Noc-Readonly-Kestrel" AES "Priv-Kestrel-2025"',
        "Priv-Kestrel-2025",
    ),
    (
        "snmp-unquoted",
        "createUser ops SHA Noc-Readonly-Kestrel AES Priv-Kestrel-2025",
        "Noc-Readonly-Kestrel",
    ),
    ("eap-phase2", '"t" TTLS-MSCHAPV2 "Winter2025!" [2]', "Winter2025!"),
    (
        "second-collection",
        'api_keys = (); SECRET_KEYS = ["Wn4Hs8Qk1Ld6Fz3Rp9Vt2M"]',
        "Wn4Hs8Qk1Ld6Fz3Rp9Vt2M",
    ),
    ("perl-hash-values", 'my %passwords = ("alice" => "s3cretpw9", "bob" => "Hunter2x!")', "s3cretpw9"),
    ("quoted-user-key", '{"user": "alice:P@ssw0rd!"}', "P@ssw0rd!"),
    ("netrc-after-prose", "For login with user admin password Tr0ub4dor&3 works", "Tr0ub4dor&3"),
    (
        "dsn-arguments-perl",
        "@lookup_sql_dsn = ( [ 'DBI:Pg:database=amavis;host=db', 'amavis', 'Qu4rantine.Otter' ]);",
        "Qu4rantine.Otter",
    ),
    (
        "dsn-arguments-jdbc",
        'DriverManager.getConnection("jdbc:mysql://db:3306/app", "app", "Sq1-Pw-2024");',
        "Sq1-Pw-2024",
    ),
    (
        "dsn-arguments-pdo",
        '$pdo = new PDO("mysql:host=localhost;dbname=test", "root", "Pd0-Secret!");',
        "Pd0-Secret!",
    ),
    (
        "base64-starting-with-slash",
        "set priv-pwd ENC /WekAHHK5g0OwakH/sim+mHYcCDXdO4+V0DgV9l4vb3e0zjnrbqlcU0ww0t7z",
        "/WekAHHK5g0OwakH/sim+mHYcCDXdO4+V0DgV9l4vb3e0zjnrbqlcU0ww0t7z",
    ),
    (
        "yaml-block",
        "secrets:\n  system:\n    - Hq4vN8zR2kT7mW1xYb6pLs3dF9cJ0gAe\n  cookie: []\n",
        "Hq4vN8zR2kT7mW1xYb6pLs3dF9cJ0gAe",
    ),
    (
        "json-block",
        '"credentials": {\n  "admin": "GS91Rc5Sq6PEj0hi7MflNgOV+22iiSv+MmzJnFO2wuk= /2vZzjR4SGyG/fJBeHsG6lq1NdUXEa/L+K+26iG8W5I="\n}',
        "GS91Rc5Sq6PEj0hi7MflNgOV+22iiSv+MmzJnFO2wuk=",
    ),
    # entries.py: a collection's values, a user's entry, a method's secret, a scheme's encoding
    (
        "collection-dict",
        'API_TOKEN_PEPPERS = {1: "Wn4Hs8Qk1Ld6Fz3Rp9Vt2Mx7Cb5Jy0Ga8"}',
        "Wn4Hs8Qk1Ld6Fz3Rp9Vt2Mx7Cb5Jy0Ga8",
    ),
    ("collection-plural", 'SECRET_KEYS = ["a", "Ko1Pi6Sr3Tw9NeWn4Hs8Qk1Ld6"]', "Ko1Pi6Sr3Tw9NeWn4Hs8Qk1Ld6"),
    ("collection-dict-key-kept", 'api_keys: {"billing": "Wn4Hs8Qk1Ld6Fz3Rp9Vt2M"}', "Wn4Hs8Qk1Ld6Fz3Rp9Vt2M"),
    ("user-entry", "user=kiosk-lobby:Lobby.Cam.2025", "Lobby.Cam.2025"),
    ("user-entry-scheme", "users relay:CL:Pr0xy!Vesna2024", "Pr0xy!Vesna2024"),
    ("method-secret", '"DOMAIN\\user"\tMSCHAPV2\t"Tr0ub4dor&3"', "Tr0ub4dor&3"),
    ("method-secret-snmp", 'createUser authPrivUser SHA "b7Vq!x2Lm9#zRt4P" AES', "b7Vq!x2Lm9#zRt4P"),
    ("obfuscated", "job-reader:OBF:1fod1ino1ing1hva1tvf1z7e1irn,user", "1fod1ino1ing1hva1tvf1z7e1irn"),
    (
        "md5-scheme",
        "job-runner:MD5:b3be3aa83a7ead94c6f9fb7eeaf1244c,user",
        "b3be3aa83a7ead94c6f9fb7eeaf1244c",
    ),
    # a user and a password hash on a line of their own: a password file's entry (pgpool's pcp.conf)
    (
        "user-hash-line",
        "# USERID:MD5PASSWD\nrelay:5f4dcc3b5aa765d61d8327deb882cf99\n",
        "5f4dcc3b5aa765d61d8327deb882cf99",
    ),
    ("daemon-directive", "auth_pass Kx7vR2pQ", "Kx7vR2pQ"),
    ("directive-after-args", "sentinel auth-pass mymaster Qm9vLm8-pX2r_wq", "Qm9vLm8-pX2r_wq"),
    ("directive-type-word", "d-i passwd/user-password password Preseed-User-4410", "Preseed-User-4410"),
    ("directive-flag-skipped", "rootpw --plaintext Ks-Root-Pw-93", "Ks-Root-Pw-93"),
    ("router-encryption-type", "username ddclient password 7 107D3D232342041E3A", "107D3D232342041E3A"),
    ("router-secret", "enable secret 5 $1$Q0Zl$LN7ONybETL5LJZF1", "$1$Q0Zl$LN7ONybETL5LJZF1"),
    ("community", " rocommunity c0mmUn1ty-Ro-88  default    -V systemonly", "c0mmUn1ty-Ro-88"),
    ("weak-word-alone", "password vagrant", "vagrant"),
    ("misspelt-name-xml", '<option name="passwod" value="Mnt-Ice-7765" />', "Mnt-Ice-7765"),
    ("child-value-xml", "<Password>\n  <Value>LocalAcct-Pw-31</Value>\n</Password>", "LocalAcct-Pw-31"),
    (
        "proxy-header",
        'proxy_set_header Authorization "Basic YmFja2VuZDpOZ2lueC1VcHN0cmVhbS05MQ==";',
        "YmFja2VuZDpOZ2lueC1VcHN0cmVhbS05MQ==",
    ),
    (
        "custom-header-directive",
        "proxy_set_header X-Upstream-Token upt_Hq7Zx2Lm9Rv4Tk8Wn3Bs6Yc1;",
        "upt_Hq7Zx2Lm9Rv4Tk8Wn3Bs6Yc1",
    ),
    ("header-in-curl", 'curl -H "X-Acme-Token: 7Hq2Lx9Pw4" https://api.example', "7Hq2Lx9Pw4"),
    ("credential-flag", "acmectl deploy --api-token abcd1234efgh --verbose", "abcd1234efgh"),
    ("credential-flag-equals", "tool --db-pass=hunter2x", "hunter2x"),
    ("haproxy-user-password", "stats auth admin:H4proxy-St4ts", "H4proxy-St4ts"),
    ("url-userinfo", "DATABASE_URL=postgres://app:p#ss@w0rd!@db.internal:5432/app", "p#ss@w0rd!"),
    ("compound-key", "turn_external_secret = 'tUrN-Ext-8Hq2Lx9Pw'", "tUrN-Ext-8Hq2Lx9Pw"),
    (
        "unknown-vendor-token",
        'export X="ztk_live_4Q9vX2mB7rL8tY3wZ6pN1sK5"',
        "ztk_live_4Q9vX2mB7rL8tY3wZ6pN1sK5",
    ),
    (
        "letters-only-token",
        "login --with 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",
        "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",
    ),
    (
        "dotted-prefix-token",
        "dp.st.dev.bAqhcVzrhy5cRHkOlNTc0Ve6w5NUDCpcutm8vGE9myi",
        "bAqhcVzrhy5cRHkOlNTc0Ve6w5NUDCpcutm8vGE9myi",
    ),
    ("hash-scheme", "bob:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=", "W6ph5Mm5Pz8GgiULbPgzG37mj9g="),
    (
        "crypt-hash",
        "root:$6$qoE2letU$wWPRl.PVczjzeMVgjiA8LLy2nOyZbf7Amj3qLIL978o18:19000:0",
        "wWPRl.PVczjzeMVgjiA8LLy2nOyZbf7Amj3qLIL978o18",
    ),
    ("jwt", "token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhYmMifQ.c2lnbmF0dXJlMTIz", "eyJzdWIiOiJhYmMifQ"),
    ("base64-userinfo", "data:\n  extra: 'YWRtaW46cGFzc3dvcmQ='", "YWRtaW46cGFzc3dvcmQ="),
    ("hex-token", "const KEY = 'zkt_56748ed1d681fa90132776d7abf1455d'", "56748ed1d681fa90132776d7abf1455d"),
    (
        "token-as-url-user",
        "git clone https://zkt_Rgu9XkihJjwHAP6eXEYxaPN@git.example/r.git",
        "Rgu9XkihJjwHAP6eXEYxaPN",
    ),
    ("base64url-body", "acme.AAAAAQJgxDgqs-GNorpo_OR8hPZ5SU-ynBvCl764jyRP", "OR8hPZ5SU-ynBvCl764jyRP"),
    (
        "mysql-hash",
        "root_password_hash: '*DB024244E2FCBB42DE26E00D1688F3D3C020AE67'",
        "DB024244E2FCBB42DE26E00D1688F3D3C020AE67",
    ),
    ("user-and-password-flags", "psexec \\\\host -u DOMAIN\\admin -p Kx7vR2pQ cmd", "Kx7vR2pQ"),
    ("password-flag-attached", "mysql -u root -pS3cret!x app", "S3cret!x"),
    ("tool-password-flag", "redis-cli -h cache -a Rd5-Pw-2291 ping", "Rd5-Pw-2291"),
    ("ldap-bind-password", "ldapsearch -x -D cn=admin,dc=ex -w Ld4p-Bind-77 -b dc=ex", "Ld4p-Bind-77"),
    ("net-use", "net use Z: \\\\srv\\share /user:CORP\\bob Sh4re-Pw-9", "Sh4re-Pw-9"),
    ("password-stdin", "echo 'Reg-Pw-4471' | docker login -u bob --password-stdin", "Reg-Pw-4471"),
    ("go-dsn", 'dsn = "app:Mx7#kQ2pZr@tcp(127.0.0.1:3306)/app"', "Mx7#kQ2pZr"),
    (
        "webhook-url",
        "curl -X POST https://chat.example.com/api/webhooks/1234567890/aB3xY7zQ9wLm2Np4Rt6Vb8Kc0Df5",
        "aB3xY7zQ9wLm2Np4Rt6Vb8Kc0Df5",
    ),
    ("typed-value", '{ "type" : "password",\n  "value" : "Alice-in-Chains#1865" }', "Alice-in-Chains#1865"),
    ("copula", "# Password is: Tannenbaum#7", "Tannenbaum#7"),
    ("mysql-quoted-attached", "mysql -uroot -p'S3cr3t!x' app", "S3cr3t!x"),
    ("net-use-password-first", "NET USE Z: \\\\srv\\share Sh4re-Pw-9 /USER:CORP\\bob", "Sh4re-Pw-9"),
    ("tool-by-path", '"C:\\Program Files\\7-Zip\\7z.exe" a "-pZip-Pw-88" out.7z dir', "Zip-Pw-88"),
    ("echo-n-stdin", "echo -n 'Reg-Pw-4471' | docker login -u bob --password-stdin", "Reg-Pw-4471"),
    ("dsn-raw-string-at", "dsn := `app:Mx7@kQ2pZr@tcp(db:3306)/app`", "Mx7@kQ2pZr"),
    (
        "typed-keys-between",
        '{"type":"password","temporary":false,"value":"Alice-in-Chains#1865"}',
        "Alice-in-Chains#1865",
    ),
    (
        "ssm-secure-string",
        '{"Name": "/db/pw", "Type": "SecureString", "Value": "Ssm-Pw-8812x"}',
        "Ssm-Pw-8812x",
    ),
    ("stated-in-a-sentence", "# Password is: Tannenbaum#7.", "Tannenbaum#7"),
    ("xml-bang-password", "<password>!Passw0rd</password>", "!Passw0rd"),
    ("digit-in-flag-name", "java -jar app.jar -s3secret Hunt3r-Pw-22", "Hunt3r-Pw-22"),
    (
        "numbered-key",
        "BOT=8123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw",
        "AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw",
    ),
    # round 6 of the public-config corpus, dev half (Leiningen, Bugzilla, OpenTelemetry)
    ("edn-keyword", '{:username "milgrim" :passphrase "Archiva-Pelican-71"}', "Archiva-Pelican-71"),
    ("perl-hash-subscript", "$answer{'ADMIN_PASSWORD'} = 'Bugzilla-Tundra-2209';", "Bugzilla-Tundra-2209"),
    ("perl-bare-subscript", "$conf{db_pass} = 'Bugzilla-Tundra-2209';", "Bugzilla-Tundra-2209"),
    ("htpasswd-block-scalar", "htpasswd: |\n  ingest-eu:Birch-Lantern-08\n", "Birch-Lantern-08"),
    ("htpasswd-inline", "  htpasswd:\n    inline: |\n      ingest-eu:Birch-Lantern-08\n", "Birch-Lantern-08"),
    ("password-ending-in-a-bracket", "imaps://me:Pa55w]@host", "Pa55w]"),
    ("my-and-more", "password: my-dog-rex-7", "my-dog-rex-7"),
    # round 7 of the public-config corpus, dev half (Tarantool, Overseerr)
    (
        "schemeless-userinfo",
        "replication = {'replicator:Vole-Cistern-5290@127.0.0.1:3301'}",
        "Vole-Cistern-5290",
    ),
    ("curl-proxy", "curl -x ops:Pr0xy-Pass@proxy.corp:3128 https://example.test", "Pr0xy-Pass"),
    ("private-half", '"vapidPrivate": "6IB4Vsh4ggVb2ZRNe--KeOCokyIVDcqHEic7Ao1fHes"', "6IB4Vsh4ggVb2ZRNe"),
    # an independent review's close variants: a block scalar is the value itself
    ("password-block-scalar", "password: |\n  Birch-Lantern-08\n", "Birch-Lantern-08"),
    ("password-folded-scalar", "bind_password: >-\n    Birch-Lantern-08\n", "Birch-Lantern-08"),
    ("indentation-indicator", "htpasswd: |2\n  ingest-eu:Birch-Lantern-08\n", "Birch-Lantern-08"),
    ("my-password-is-one", "password: my-password", "my-password"),
    # session 18, from the public-config corpus's dev half: where the text says where the credential is
    (
        "header-column",
        '# client\tserver\tsecret\t\tIP addresses\nbranch-gw\tpppoe-gw\t"Wicker7-Sable-Lane"\t10.44.0.18\n'
        '"laptop"\t*\tq3Vx8TmL2pRz\t*\n',
        "Wicker7-Sable-Lane",
    ),
    (
        "upper-case-header",
        "TOKEN                     TTL   EXPIRES                USAGES\n"
        "abcdef.0123456789abcdef   23h   2024-05-02T10:00:00Z   authentication,signing\n"
        "x7k2qp.4f9c2a7d81e0b3c5   12h   2024-05-02T00:00:00Z   signing\n",
        "0123456789abcdef",
    ),
    (
        "template-realm",
        "#  <username>: <password>[,<rolename> ...]\n#\nadmin:Rund3ck-Ops-Harbor,user,admin\n",
        "Rund3ck-Ops-Harbor",
    ),
    (
        "template-literal",
        "#   user_<account>_<user> = <key> [group] [group]\nuser_test_tester2 = t2-Hq7VwN3xRb0s .admin\n",
        "t2-Hq7VwN3xRb0s",
    ),
    # a compound name deep in a long line; an algorithm's name before a value; an `auth` compound
    (
        "deep-compound",
        "onu 1 pri wifi_ssid 1 name Klienti-5G hide disable auth_mode wpa2psk encrypt_type aes shared_key Pelican-Dune-2230 rekey",
        "Pelican-Dune-2230",
    ),
    (
        "after-algorithm",
        'snmp user "admin" auth md5 encrypted 6GLCtahFwSkZ7bN21cMORw6yy',
        "6GLCtahFwSkZ7bN21cMORw6yy",
    ),
    ("auth-sha", "snmp-server user bob grp v3 auth sha Auth-Pw-1234 priv aes 128 x", "Auth-Pw-1234"),
    (
        "rpcauth",
        "rpcauth=electrs:1eda8c727b79b567$1728ef48c96aebd8161d050fe21",
        "1728ef48c96aebd8161d050fe21",
    ),
    ("dots-in-a-password", "password: Xq8vR2pQ7zLmW4...", "Xq8vR2pQ7zLmW4"),
    ("password-cut-short", "Logging in as admin with password=Hunter2024...", "Hunter2024"),
    ("token-cut-short", "export GITHUB_TOKEN=ghp_Ab12Cd34…", "Ab12Cd34"),
    ("percent-wrapped", "password=%Pa55word%\nsecret: %%Winter2024%%", "Winter2024"),
    (
        "quoted-after-a-name",
        "poll mail.example.com protocol imap user 'me' there with password 'f3tch-pw' is 'me' here",
        "f3tch-pw",
    ),
    ("snmp-tool-community", "snmpwalk -v2c -c S3cr3tC0mm 10.0.0.1", "S3cr3tC0mm"),
    ("snmp-tool-v3", "trapsess -v 3 -u ops -a SHA -A authPass99 -x AES -X privPass99 10.0.0.5", "privPass99"),
    ("com2sec", "com2sec -Cn ctx rw 10.0.0.0/8 Wr1te-Comm", "Wr1te-Comm"),
    ("mode-list-then-community", "authCommunity log,execute,net Tr4pC0mm", "Tr4pC0mm"),
    ("trap-sink", "  trapsink     localhost tr4pSink-Ops-71", "tr4pSink-Ops-71"),
    ("hand-made-key", "tacacs-server 10.0.0.5\n  key tac1-Sh4red-Birch\n", "tac1-Sh4red-Birch"),
    (
        "templates-together",
        "#   user_<account>_<user> = <key> [group]\n#   user64_<account_b64>_<user_b64> = <key> [group]\n"
        "user_test_tester2 = t2-Hq7VwN3xRb0s .admin\n",
        "t2-Hq7VwN3xRb0s",
    ),
]
# (case, text): nothing is redacted
SPARED = [
    ("snmp-v3-host", "snmp-server host 10.1.2.4 version 3 priv v3user"),
    ("export-mask", "hash-mgmt-user rocks password hash AAAAAAAAAABBBBBBBBBBCCCCCCCCCC usertype read-only"),
    # an independent review's probes of the entries readers (ordinary text they first redacted)
    (
        "aws-user-arn",
        "An error occurred (AccessDenied): User: arn:aws:iam::123456789012:user/alice is not authorized",
    ),
    ("k8s-service-account", 'pods is forbidden: User "system:serviceaccount:default:default" cannot list'),
    ("user-version", "user: python:3.11-slim"),
    ("user-camel-group", "account: storage:StorageAccount01"),
    ("passwd-line", "user alice:x:1000:1000:Alice:/home/alice:/bin/bash"),
    (
        "lockfile-hashes",
        '"tokenizers": {\n  "hashes": [\n    "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"\n  ]\n}',
    ),
    (
        "jwks-public-key",
        '"keys": [\n  {\n    "kid": "8f3kd9slq03mdk38fjd83kdqZ1",\n    "n": "0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78"\n  }\n]',
    ),
    ("block-commit", "token:\n  commit: 4f0773b2c3a9e1d5f6a7b8c9d0e1f2a3b4c5d6e7"),
    ("block-issuer", "auth:\n  oidc:\n    issuer: https://dev-123456.okta.com/oauth2/default"),
    ("form-rules", 'password: [{ required: true, message: "Password is required", trigger: "blur" }]'),
    ("laravel-rules", "'password' => ['nullable', 'string', 'min:12'],"),
    ("deny-list", 'COMMON_PASSWORDS = {"123456","password","qwerty","abc123"}'),
    ("digest-after-method", 'checksum MD5 "d41d8cd98f00b204e9800998ecf8427e"'),
    ("quoted-identifiers", '"users" AS "u"'),
    ("md5-checksum", "checksum: MD5:d41d8cd98f00b204e9800998ecf8427e"),
    ("crypt-mode", "mode=CRYPT:des_ede3_cbc"),
    ("jdbc-prefix-list", 'supported = ["jdbc:mysql", "jdbc:postgresql", "jdbc:oracle"]'),
    ("branch-sha-line", "main:4f0773b2c3a9e1d5f6a7b8c9d0e1f2a3b4c5d6e7"),
    ("plus-in-path", "secret_path: /home/me/projects/notepad++/build2024"),
    ("dsn-arguments-variables", "DBI->connect($dsn, $user, $pass)"),
    ("dsn-arguments-empty", 'DBI->connect("dbi:SQLite:dbname=x.db", "", "")'),
    ("path-after-name", "secret_file: /run/secrets/db_password"),
    ("yaml-block-of-names", "imagePullSecrets:\n  - name: regcred\n  - name: ghcr-pull-secret\n"),
    ("yaml-block-ends", "tokens:\n  ttl: 3600\nbuild: Hq4vN8zR2kT7mW1xYb6pLs3dF9cJ0gAe\n"),
    ("uid-gid", 'user: "1000:1000"'),
    ("user-group", "USER app:app"),
    ("user-group-word", "user = nobody:nogroup"),
    ("login-time", "login: 2024-01-01T10:00:00"),
    ("prose-user-colon", "6. All user messages:\\n   - Implement the parser"),
    ("collection-of-names", 'password_keys = ["db", "cache", "queue"]'),
    ("collection-closes", 'tokens = ["a"]; token_id = "Wn4Hs8Qk1Ld6Fz3Rp9Vt2Mx7Cb5Jy0Ga8"'),
    ("collection-escaped", 'pass: [\\"*/*\\"], x: \\"uuid-9Wn4Hs8Qk1Ld6Fz3Rp9Vt\\"'),
    (
        "prose-username-password",
        "# both mechanisms conduct username and password validation in different ways.",
    ),
    (
        "oracle-cloud-id",
        "user = ocid1.user.oc1..aaaaaaaakjkdrsqwljdpszrynrcosihxf2uspf7pzt7d4fmqomui2ngzysna",
    ),
    ("digest-line", "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"),
    ("commit-line", "  commit:4f0773b2c3a9e1d5f6a7b8c9d0e1f2a3b4c5d6e7"),
    ("user-hash-in-prose", "the entry alice:5f4dcc3b5aa765d61d8327deb882cf99 is an example"),
    ("reference", "sentinel auth-pass mymaster <password>"),
    ("variable", "requirepass ${REDIS_PASSWORD}"),
    ("template-call", "client_secret: \"{{ lookup('env', 'CLIENT_SECRET') }}\""),
    ("prose", "Set the password to use to authenticate with the master and replicas."),
    ("markdown-bullet", "  * Token usage"),
    ("prose-heading", "Reduce token usage"),
    ("table-heading", "# client\tserver\tsecret\t\tIP addresses"),
    ("mode-word", "auth_type PASS"),
    ("code-return", "return token"),
    ("computed", 'password System.getenv("REPO_PASSWORD")'),
    ("help-metavar", "  -p PASSWORD, --password PASSWORD   database password"),
    ("prose-flag", "Pass the --password flag to be prompted for it."),
    ("flag-value-name", "mysqldump --password-stdin shop"),
    ("about-word", "auth_file = /etc/pgbouncer/userlist.txt"),
    ("authentication", "aaa authentication login default local"),
    ("where-made", "# HuggingFace API Token https://huggingface.co/settings/tokens"),
    ("template", "amqp://{{ rabbit_user }}:{{ rabbit_pass }}@rabbit/"),
    ("tool-use-id", '"id":"toolu_01A09q90qw90lq917835lq9X"'),
    ("openai-call-id", "call_8fJ2kL9mN3pQ5rS7tU1vW4xY"),
    ("id-position", '"tool_call_id": "call2_abc123XYZ789defGHI456jk"'),
    ("hex-digest", "sha_0123456789abcdef0123456789abcdef01234567"),
    ("uuid", "session 2ea6c743-4cb1-45cf-9d5c-cacbed866043"),
    ("camel-name", "my_SomeLongIdentifierName12"),
    (
        "capitalised-words",
        'data-cel-widget="desktop-rhf_SponsoredProductsRemoteRHFSearchEXPSubsK2ClickPagination"',
    ),
    ("base64-words", "bedrock-api-key-YmVkcm9jay5hbWF6b25hd3MuY29x"),
    (
        "integrity-hash",
        "integrity: sha512-rp3So07KcdmmKbGvgaNxQSJr7bGVSVk5S9Eq1F+ppbRo70+YeaDxkw5Dd8NPN+GD6bjnYm2VuPuCXmpuYvmCXQ==",
    ),
    ("public-key-prefix", "pk_live_ReTllpYQYfIZu2Jnf2lAPFjD"),
    ("path", "/usr/lib/foo_Abc123Def456Ghi789Jkl0"),
    ("digest-prefix-hex", "commit_5674a8ed1d681fa90132776d7abf1455d"),
    ("short-hex", "build-5674a8ed1d681fa9"),
    ("port-after-p", "psql -U app -p 5432 shop"),
    ("publish-after-p", "docker run -u 1000 -p 8080:80 nginx"),
    ("flags-without-values", "cp -u -p a b"),
    ("windows-variable", "psexec \\\\host -u admin -p %ADMIN_PW% cmd"),
    ("docs-webhook", "see https://docs.github.com/en/webhooks/using-webhooks/creating-webhooks"),
    ("hook-id", "GET /repos/o/r/hooks/12345/pings"),
    ("piped-variable", "echo $TOKEN | docker login --password-stdin"),
    ("one-letter-flag-value", "7z x archive.7z -o/tmp/out"),
    ("a-call", 'EMAIL_HOST_PASSWORD = os.getenv("EMAIL_HOST_PASSWORD", "")'),
    ("next-key", ";;   dbname= host= port= user= password= auth_user="),
    ("auth-method", 'phase2="auth=MSCHAPV2"'),
    ("yaml-tag", "  auth_token: !vault |"),
    ("prose-copula", "token was revoked"),
    ("typed-non-secret", '{"type": "string", "value": "hello"}'),
    ("sudo-user", "mkdir -p build && sudo -u www-data php artisan migrate"),
    ("pip-upgrade", "pip install -U pip && python -m pytest -p no:cacheprovider"),
    ("port-range", 'docker run -u "$(id -u)" -p 9000-9010:9000-9010 img'),
    ("cipher-suite", "# tls-ciphersuites TLS_CHACHA20_POLY1305_SHA256"),
    ("constant", "CONFIG_MAX_RETRIES_FOR_S3_UPLOADS_V2 = 5"),
    ("error-code", "npm ERR! code ERR_PNPM_FETCH_404_Not_Found_For_Pkg"),
    ("word-and-uuid", "Started kernel-5f1a2b3c-4d5e-4f70-8192-a3b4c5d6e7f8 ok"),
    ("word-and-hex", "dist-5f1a2b3c4d5e4f708192a3b4c5d6e7f8"),
    ("docs-slug", "https://docs.stripe.com/webhooks/quickstart-2024-checkout-session-completed"),
    ("hook-file", "https://github.com/o/r/blob/main/src/hooks/useEffectHook2024.js"),
    ("typed-name", '{"type": "secret", "value": "my-app-secret-name"}'),
    ("percent-escapes", "caf%C3%A9%C3%A9t%C3%A9"),
    ("traceparent", '@valid_traceparent "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"'),
    ("clock-time", "12:34:56 started worker_process_manager_supervisor"),
    ("edn-reference", '{:api-key "${API_KEY}" :username "ops" :url "https://repo.clojars.org"}'),
    ("perl-subscript-not-a-credential", "$answer{'password_complexity'} = 'bmo';"),
    ("password-block-numbers", "passwords:\n  - 8080:80\n  rotated: 12:30\n  file: /etc/pw\n"),
    ("password-block-reference", "htpasswd: |\n  ops:${OPS_PASSWORD}\n"),
    # the public-config corpus's dev near misses: a usage line's optional part, "my" and the name
    ("usage-optional-password", "# source=imaps://username[:password]@hostname[:port]"),
    ("usage-nested-optional", "#   postgres://[pqgotest[:password]]@localhost[/dbname]?sslmode=disable"),
    ("my-token", "  bearerToken: my-token"),
    ("public-half", '"vapidPublic": "BK_EpP8NDm9waor2zn6_S28o3ZYv4kCkJOfYpO3pt3W6jnPmxrgTLANUBNbbyaNatPnSQ"'),
    ("private-flag", '{"is_private": true, "visibility_private": "internal"}'),
    ("git-remote", "git@github.com:org/repo.git and img:1.0@sha256:1234abcd"),
    ("userinfo-reference", "replication = {'replicator:${REPL_PASSWORD}@db:3301'}"),
    # an independent review's probes of the new readers (ordinary text they first redacted)
    ("clojure-prose", '(println :password "is required") (str :token " expired")'),
    ("clojure-word", '(throw (ex-info "bad" {:password "missing"})) (assoc req :token "Bearer")'),
    ("passwd-records", "passwd: |\n  nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"),
    ("port-and-step", "passwords:\n  - 127.0.0.1:6379/0\npass:\n  - ci:lint\n  rotated: 02:30:00\n"),
    ("prose-scalar", "token: >\n  This is the token used for the deploy job\n"),
    # session 18's readers: a sentence is no header, a pair's layout no template, a file no value
    ("header-prose", "# Secrets for authentication using CHAP\nbranch-gw pppoe-gw Wicker7-Sable-Lane\n"),
    (
        "header-file-reference",
        "# client server secret IP\n* vpn-gw @/etc/ppp/secrets/units.key 10.0.0.0/24\n",
    ),
    ("header-placeholders", "# client server secret IP\n* * * *\n"),
    ("template-pair-layout", "# <key> = <value>\nserver = db-7.internal\nport = 5432\n"),
    ("template-one-placeholder", "# password: <password>\nmode: strict-2\n"),
    ("deep-prose", "we rotated the shared_key Pelican-Dune-2230 on all of the access points"),
    ("algorithm-word", "auth md5 file"),
    ("key-checksum", "key sha1 da39a3ee5e6b4b0d3255bfef95601890afd80709"),
    # cut short for show, an interpolated path (round 8's dev half; a Phoenix transcript's `...`)
    ("key-release-name", "key Build-2024-Release"),
    # a second review's probes: names and keys with a digit in a word, resources in errors,
    # passwords cut short, passwords in percent signs
    ("i18n-key", '{"key": "homePage.step2Title", "default": "Next"}'),
    ("bucket-key", "key: S3BucketName-prod\nkey: IPv6Address-Primary\nCache miss for key User-Profile2x-v3"),
    ("resource-not-found", 'Error from server (NotFound): secrets "db-creds-2" not found'),
    ("token-will-expire", "Warning: the token 'ci-runner-7' will expire in 3 days"),
    ("snmp-default", "snmpget -v2c -c public host sysUpTime.0"),
    ("count-flag", "grep -c foo file.txt && wc -c file.txt"),
    ("double-percent-token", "            'pass' => '%%PHINX_DBPASS%%',"),
    ("stated-word", "# adding password realm where secret is password 'quickstartUser' converted to base64"),
    ("quoted-prose", """print("the password 'is' for the user")"""),
    ("trap-sink-default", "trap2sink 10.0.0.1 public 162\ntrapsink 10.0.0.2 162"),
    ("key-version-name", "auth = api-v2-Gateway"),
    ("elided-key", '\t-- openai_api_key: "sk-...",'),
    ("elided-base", "secret_key_base: ..."),
    ("elided-middle", "token: ghp_…WXYZ"),
    ("interpolated-path", '    private_key => "/etc/rex/aws/keys/$ec2_key.pem",'),
    # an independent review's probes: code, prose and pairs after a comment that looks like a header
    ("header-code", "# token counting helpers\ndef count_tokens(text):\n    return len(text.split())\n"),
    ("header-exec", '# pass through remaining args\nexec myprog "$@"\nexec other "$@"\n'),
    ("header-pairs", '# Secret Manager settings\nproject = "acme-prod-42"\nregion = "eu-west-1"\n'),
    ("header-requirements", "# password hashing libs\nbcrypt==4.1.2\nargon2-cffi==23.1.0\n"),
    ("header-yaml", "# Secret env vars\n- name: X\n  value: db.internal\n"),
    ("header-markdown", "# Token Bucket Algorithm\nEach bucket holds N tokens and refills\n"),
    (
        "header-names",
        "NAME       READY   SECRET                AGE\napi-prod   True    api-prod-tls-x7k2q    12d\n"
        "web        True    web-tls-certificate   3d\n",
    ),
    ("template-code", "#   <username> <password>\ndef load(path):\n    with open(path) as f:\n"),
    ("template-imports", "# <user> <token>\n\n\nimport os\nfrom sys import argv\n"),
    ("template-sql", "-- <name> <token>\nSELECT id, name FROM users;\n"),
    (
        "template-known-hosts",
        "# <hostname> <keytype> <key>\nexample.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n",
    ),
    ("noauth", "noauth = Xq9mm2kLr7"),
]


@pytest.mark.parametrize(("case", "text", "secret"), CAUGHT, ids=[c[0] for c in CAUGHT])
def test_a_credential_no_format_rule_names_is_redacted(case: str, text: str, secret: str) -> None:
    """Without the config positions, the generic layer takes the credential and leaves its name."""
    out = NO_FORMATS.redact_text(text)
    assert secret not in out, out
    assert "[REDACTED:" in out


@pytest.mark.parametrize(("case", "text"), SPARED, ids=[c[0] for c in SPARED])
def test_a_reference_prose_id_or_hash_is_untouched(case: str, text: str) -> None:
    """Placeholders, prose, code, ids, digests and names come through unchanged."""
    assert R.redact_text(text) == text


@pytest.mark.parametrize(
    "encode",
    [
        lambda t: base64.b64encode(t.encode()).decode(),
        lambda t: quote(t, safe=""),
        lambda t: json.dumps(t)[1:-1],
    ],
    ids=["base64", "percent", "json-escaped"],
)
def test_encoded_directives_are_redacted(encode: object) -> None:
    """A daemon directive inside base64, percent-encoding or JSON escapes loses its credential too."""
    text = "global_defs {\n  router_id r1\n}\nsentinel auth-pass mymaster Qm9vLm8-pX2r_wq\n"
    encoded = encode(text)  # type: ignore[operator]
    out = R.redact_text(f"payload: {encoded}")
    assert "Qm9vLm8-pX2r_wq" not in out and quote("Qm9vLm8-pX2r_wq", safe="") not in out
    assert "[REDACTED:" in out


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("auth_pass", "password"),
        ("requirepass", "password"),
        ("passwod", "password"),
        ("rocommunity", "secret"),
        ("wpa_psk", "key"),
        ("X-Upstream-Token", "token"),
        ("passwd/user-password", "password"),
        ("turn_external_secret", "secret"),
        ("creds", "credential"),
        ("rpcauth", "credential"),
        ("oauth", None),
        ("passwd/user-fullname", None),
        ("authentication", None),
        ("password-encryption", None),
        ("token_url", None),
        ("bypass", None),
        ("passwordeval", None),
        ("existingSecret", None),
        ("credo", None),
        ("max_tokens", None),
    ],
)
def test_credential_names_in_any_spelling(name: str, kind: str | None) -> None:
    """A name's last word decides: a credential stem or compound names one, an about-word does not."""
    named = credential_name(name)
    assert (named[0] if named else None) == kind


@pytest.mark.parametrize(
    ("value", "template"),
    [
        ("${DB_PASSWORD}", True),
        ("prefix-${ENV}", True),
        ("#{visibility}_cursor", True),
        ("{{ lookup('env', 'X') }}", True),
        ("${A:-${B}}", True),
        ("${x[0]}-{{ y }}", True),
        ("m{{h}o)p${e]nob(ody[finds>-_$#x}}", False),  # detect-secrets' test value: brackets unbalanced
        ("Pa${ss-Wq7", False),  # never closes
        ("{{x}", False),  # one brace
        ("Kq${a}b${c", False),  # the second one never closes
        ("Kq${a)b}", False),
        ("plain-Pw-42", False),
    ],
)
def test_a_value_is_spared_as_a_template_only_when_every_template_in_it_is_well_formed(
    value: str, template: bool
) -> None:
    assert has_template(value) is template
    assert spared(value, "password", True) is template


@settings(max_examples=200, deadline=None)
@given(
    before=st.text(alphabet="abcXYZ019-_.:@!", max_size=12),
    name=st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}", fullmatch=True),
    after=st.text(alphabet="abcXYZ019-_.:@!", max_size=12),
    opener=st.sampled_from(["${", "#{", "{{", "{{ "]),
)
def test_a_well_formed_template_anywhere_is_spared_and_an_unclosed_one_is_not(
    before: str, name: str, after: str, opener: str
) -> None:
    closer = "}}" if opener.startswith("{{") else "}"
    assert has_template(f"{before}{opener}{name}{closer}{after}")
    assert not has_template(f"{before}{opener}{name}{after}")
