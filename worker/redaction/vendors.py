"""Vendor token formats: secrets known by their looks, wherever they sit.

Key blocks, provider-prefixed tokens (AI, cloud, code hosting and CI, messaging, payments and
SaaS), vendor formats found by a nearby name (`sonar.login=`, `SSWS`, `/api/v1/<token>/`), JWTs
and password hashes. Most are confirmed by `token` (anything but an obvious placeholder); the
judges are in judges.py. detectors.py places `TOKENS` first in the table.
"""

from __future__ import annotations

from worker.redaction.judges import (
    anthropic_key,
    azure_client_secret,
    digits_then,
    discord,
    private_key,
    sized,
    slack,
    telegram,
    token,
)
from worker.redaction.positions import auth_value, short_flag_password
from worker.redaction.rules import Detector

# Characters of a token, and a word boundary that also treats `-` as part of a token.
_T = r"[A-Za-z0-9_-]"
_END = r"(?:[^A-Za-z0-9_-]|$)"
_B64 = r"[A-Za-z0-9+/]"


TOKENS: tuple[Detector, ...] = (
    # Key blocks
    Detector(
        "private_key",
        r"-----BEGIN[A-Z0-9 _-]{0,40} PRIVATE KEY(?: BLOCK)?-----"
        r"(?:(?s:.)*?-----END[A-Z0-9 _-]{0,40} PRIVATE KEY(?: BLOCK)?-----|(?:[A-Za-z0-9+/=:, \t\r\n-]|\\[nr])+)",
        private_key,
    ),
    Detector(
        "private_key",
        r"\bPuTTY-User-Key-File-\d: [^\r\n]*(?s:.)*?Private-MAC: [0-9a-f]+",
        token("private_key"),
    ),
    Detector("age_secret_key", r"\bAGE-SECRET-KEY-1[0-9A-Z]{58}\b", token("age_secret_key")),
    # AI providers
    Detector(
        "anthropic_admin_key", r"\bsk-ant-admin\d\d-" + _T + r"{20,}", anthropic_key("anthropic_admin_key")
    ),
    Detector(
        "anthropic_api_key",
        r"\bsk-ant-(?:api|oat|sid)\d\d-" + _T + r"{20,}",
        anthropic_key("anthropic_api_key"),
    ),
    Detector(
        "openai_api_key",
        r"\bsk-(?:proj-|svcacct-|admin-|None-)?" + _T + r"{16,}T3BlbkFJ" + _T + r"{16,}",
        token("openai_api_key"),
    ),
    Detector("openai_api_key", r"\bsk-(?:proj|svcacct|admin)-" + _T + r"{80,}", token("openai_api_key")),
    Detector("huggingface_token", r"\b(?:hf_|api_org_)[A-Za-z0-9]{30,40}\b", token("huggingface_token", 3.0)),
    Detector("groq_api_key", r"\bgsk_[A-Za-z0-9]{48,56}\b", token("groq_api_key")),
    Detector("perplexity_api_key", r"\bpplx-[A-Za-z0-9]{40,56}\b", token("perplexity_api_key")),
    Detector("tavily_api_key", r"\btvly-(?:dev-|prod-)?[A-Za-z0-9]{28,40}\b", token("tavily_api_key")),
    Detector("jina_api_key", r"\bjina_[a-f0-9]{32}[A-Za-z0-9_-]{20,}", token("jina_api_key")),
    Detector("firecrawl_api_key", r"\bfc-[a-f0-9]{32}\b", token("firecrawl_api_key")),
    Detector("replicate_api_token", r"\br8_[A-Za-z0-9]{37}\b", token("replicate_api_token")),
    # Cloud providers
    Detector(
        "aws_access_key",
        r"\b(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|APKA)[A-Z0-9]{16}\b",
        token("aws_access_key"),
    ),
    Detector(
        "aws_bedrock_key", r"\bABSKQmVkcm9ja0FQSUtleS[A-Za-z0-9+/]{100,}={0,2}", token("aws_bedrock_key", 3.0)
    ),
    Detector(
        "aws_bedrock_key",
        r"\bbedrock-api-key-YmVkcm9jay5hbWF6b25hd3MuY29t[A-Za-z0-9+/=]{20,}",
        token("aws_bedrock_key"),
    ),
    Detector("google_api_key", r"\b(AIza[A-Za-z0-9_-]{35})" + _END, token("google_api_key", 3.0), 1),
    Detector("google_oauth_secret", r"\bGOCSPX-[A-Za-z0-9_-]{28}\b", token("google_oauth_secret")),
    Detector("google_oauth_token", r"\bya29\.[A-Za-z0-9_-]{30,}", token("google_oauth_token")),
    Detector(
        "azure_client_secret",
        r"([A-Za-z0-9_~.]*\dQ~[A-Za-z0-9_~.-]{31,34})(?:[^A-Za-z0-9_~.-]|$)",
        azure_client_secret,
        1,
    ),
    Detector(
        "azure_storage_key",
        r"(?i:AccountKey|SharedAccessKey|AccessKey)=(" + _B64 + r"{30,}={0,2})",
        token("azure_storage_key"),
        1,
    ),
    Detector("azure_sas_token", r"[?&]sig=([A-Za-z0-9%+/]{30,}(?:%3D|=){0,2})", token("azure_sas_token"), 1),
    Detector("databricks_token", r"\bdapi[a-f0-9]{32}(?:-\d)?\b", token("databricks_token")),
    Detector("digitalocean_token", r"\bdo[opr]_v1_[a-f0-9]{64}\b", token("digitalocean_token")),
    Detector("alibaba_access_key", r"\bLTAI[A-Za-z0-9]{20}\b", token("alibaba_access_key", 3.0)),
    Detector(
        "flyio_token",
        r"\b(?:fo1_[A-Za-z0-9_-]{43}|fm[12][ar]?_[A-Za-z0-9+/]{100,}={0,3})",
        token("flyio_token"),
    ),
    Detector("heroku_api_key", r"\bHRKU-AA[A-Za-z0-9_-]{58}\b", token("heroku_api_key")),
    Detector("vault_token", r"\bhv[sbr]\.[A-Za-z0-9_-]{24,}", token("vault_token", 3.0)),
    Detector("terraform_token", r"\b[a-zA-Z0-9]+\.atlasv1\.[A-Za-z0-9_=-]{60,70}", token("terraform_token")),
    Detector("pulumi_token", r"\bpul-[a-f0-9]{40}\b", token("pulumi_token")),
    Detector(
        "doppler_token",
        r"\bdp\.(?:pt|st|sa|ct|scim|audit)\.(?:[a-z0-9_-]+\.)?[A-Za-z0-9]{40,44}\b",
        token("doppler_token"),
    ),
    Detector("openshift_token", r"\bsha256~[A-Za-z0-9_-]{43}\b", token("openshift_token")),
    Detector("cloudflare_ca_key", r"\bv1\.0-[a-f0-9]{24}-[a-f0-9]{146}\b", token("cloudflare_ca_key")),
    Detector("scalingo_token", r"\btk-us-[A-Za-z0-9_-]{48}\b", token("scalingo_token")),
    Detector("clickhouse_secret", r"\b4b1d[A-Za-z0-9]{38}\b", token("clickhouse_secret", 3.0)),
    # Code hosting and CI
    Detector("github_token", r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,255}\b", token("github_token", 2.5)),
    Detector("github_token", r"\bgithub_pat_[A-Za-z0-9_]{60,255}\b", token("github_token")),
    Detector(
        "gitlab_token",
        r"\b(glpat-[A-Za-z0-9_-]{27,}\.[0-9a-z]{2}[0-9a-z]{7}|glpat-[A-Za-z0-9_-]{20}|glptt-[A-Za-z0-9_-]{40}"
        r"|glimt-[A-Za-z0-9_-]{25}|gloas-[A-Za-z0-9_-]{64}|glagent-[A-Za-z0-9_-]{50,}"
        r"|glcbt-(?:[0-9a-fA-F]{1,5}_)?[A-Za-z0-9_-]{20}|glrt-(?:t\d_)?[A-Za-z0-9_-]{20,}(?:\.[0-9a-z]{2}[0-9a-z]{7})?"
        r"|gl(?:dt|soat|ffct|ft|wt)-[A-Za-z0-9_-]{20}|GR1348941[A-Za-z0-9_-]{20})" + _END,
        token("gitlab_token", 2.5),
        1,
    ),
    Detector("atlassian_token", r"\bATATT3[A-Za-z0-9_=-]{100,}", token("atlassian_token")),
    Detector("bitbucket_token", r"\bATBB[A-Za-z0-9_=.-]{28,}", token("bitbucket_token", 3.0)),
    Detector(
        "sourcegraph_token",
        r"\bsgp_(?:[a-fA-F0-9]{16}|local)_[a-fA-F0-9]{40}\b|\bsgp_[a-fA-F0-9]{40}\b",
        token("sourcegraph_token", 3.0),
    ),
    Detector("sonar_token", r"\bsq[pua]_[a-f0-9]{40}\b", token("sonar_token")),
    Detector("snyk_token", r"\bsnyk_(?:uat|sat)\.[a-z0-9]{8}\.[A-Za-z0-9_-]{20,}", token("snyk_token")),
    Detector("npm_token", r"\bnpm_[A-Za-z0-9]{36}\b", token("npm_token", 3.0)),
    Detector("pypi_token", r"\bpypi-Ag[A-Za-z0-9_-]{100,}", token("pypi_token")),
    Detector("rubygems_token", r"\brubygems_[a-f0-9]{48}\b", token("rubygems_token")),
    Detector("nuget_key", r"\boy2[a-z0-9]{43}\b", token("nuget_key", 3.0)),
    Detector("dockerhub_token", r"\bdckr_pat_[A-Za-z0-9_-]{27}\b", token("dockerhub_token")),
    Detector(
        "artifactory_token",
        r"\b(?:AKCp[A-Za-z0-9]{69}|cmVmdGtuOjAxOj[A-Za-z0-9]{40,})\b",
        token("artifactory_token", 3.0),
    ),
    Detector("prefect_token", r"\bpnu_[A-Za-z0-9]{36}\b", token("prefect_token")),
    Detector("infracost_token", r"(?:^|[^.\w-])(ico-[A-Za-z0-9]{32})\b", token("infracost_token"), 1),
    Detector("readme_token", r"\brdme_[a-z0-9]{70}\b", token("readme_token", 3.0)),
    Detector(
        "sentry_token", r"\b(?:sntrys_eyJ[A-Za-z0-9+/=_]{60,}|sntryu_[a-f0-9]{64})", token("sentry_token")
    ),
    Detector(
        "grafana_token",
        r"\b(?:glc_[A-Za-z0-9+/]{32,400}={0,2}|glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}|eyJrIjoi[A-Za-z0-9]{60,400}={0,2})",
        token("grafana_token", 2.5),
    ),
    Detector("linear_api_key", r"\blin_(?:api|oauth)_[A-Za-z0-9]{40}\b", token("linear_api_key")),
    Detector("postman_api_key", r"\bPMAK-[a-f0-9]{24}-[a-f0-9]{34}\b", token("postman_api_key")),
    Detector("dynatrace_token", r"\bdt0c01\.[A-Z0-9]{24}\.[A-Z0-9]{64}\b", token("dynatrace_token")),
    Detector(
        "newrelic_key",
        r"\b(?:NRAK-[A-Z0-9]{27}|NRJS-[a-f0-9]{19}|NRII-[A-Za-z0-9_-]{32}|NRAA-[a-f0-9]{27}|(?:eu\d\dxx)?[a-f0-9]+NRAL)\b",
        token("newrelic_key", 2.5),
    ),
    Detector("octopus_api_key", r"\bAPI-[A-Z0-9]{26}\b", token("octopus_api_key", 3.0)),
    Detector("dtrack_api_key", r"\bodt_[A-Za-z0-9]{32,}\b", token("dtrack_api_key")),
    Detector("onepassword_token", r"\bops_eyJ[A-Za-z0-9+/]{250,}={0,3}", token("onepassword_token", 3.0)),
    Detector(
        "onepassword_secret_key",
        r"\bA3-[A-Z0-9]{6}-(?:[A-Z0-9]{11}|[A-Z0-9]{6}-[A-Z0-9]{5})-[A-Z0-9]{5}-[A-Z0-9]{5}-[A-Z0-9]{5}\b",
        token("onepassword_secret_key", 3.0),
    ),
    # Messaging, payments and SaaS
    Detector(
        "slack_webhook",
        r"https?:\\?/\\?/hooks\.slack\.com\\?/(?:services|workflows|triggers)\\?/[A-Za-z0-9+/_\\-]{20,}",
        token("slack_webhook"),
    ),
    Detector("slack_token", r"\bxox(?:[abposre]|e\.xox[bp])-[A-Za-z0-9-]{14,}", slack),
    Detector("slack_app_token", r"\bxapp-\d-[A-Z0-9]+-\d+-[a-z0-9]+\b", token("slack_app_token")),
    Detector(
        "discord_webhook",
        r"https?:\\?/\\?/(?:ptb\.|canary\.)?discord(?:app)?\.com\\?/api\\?/webhooks\\?/\d+\\?/[A-Za-z0-9_-]{60,}",
        token("discord_webhook"),
    ),
    Detector(
        "teams_webhook",
        r"https?:\\?/\\?/[a-z0-9-]+\.webhook\.office\.com\\?/webhookb2\\?/[A-Za-z0-9@/._-]{60,}",
        token("teams_webhook"),
    ),
    Detector(
        "discord_bot_token",
        r"\b[A-Za-z0-9][A-Za-z0-9_-]+\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,38}\b",
        discord,
    ),
    Detector(
        "telegram_bot_token", r"(?:^|[^A-Za-z0-9:_-]|/bot)(\d+:AA[A-Za-z0-9_-]{33})" + _END, telegram, 1
    ),
    Detector("stripe_key", r"\b(?:sk|rk)_(?:live|test|prod)_[A-Za-z0-9]{10,99}\b", token("stripe_key", 2.5)),
    Detector("stripe_webhook_secret", r"\bwhsec_[A-Za-z0-9]{24,}\b", token("stripe_webhook_secret")),
    Detector(
        "square_token",
        r"\b(?:EAAA[A-Za-z0-9_-]{60}|sq0(?:atp|csp)-[A-Za-z0-9_\\-]{22,43})",
        token("square_token"),
    ),
    Detector("shopify_token", r"\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}\b", token("shopify_token")),
    Detector("twilio_api_key", r"\bSK[0-9a-f]{32}\b", token("twilio_api_key", 3.0)),
    Detector("sendgrid_api_key", r"\bSG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}\b", token("sendgrid_api_key")),
    Detector("mailchimp_api_key", r"\b[0-9a-f]+-us\d{1,2}\b", sized("mailchimp_api_key", 36, 37)),
    Detector("mailgun_key", r"\bkey-[0-9a-f]{32}\b", token("mailgun_key")),
    Detector(
        "notion_token",
        r"\b(?:ntn_\d{11}[A-Za-z0-9]{35}|secret_[A-Za-z0-9]{43})\b",
        token("notion_token", 3.0),
    ),
    Detector(
        "hubspot_token",
        r"\bpat-(?:na|eu)\d-[a-f0-9]{8}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{12}\b",
        token("hubspot_token"),
    ),
    Detector("mapbox_token", r"\b[ps]k\.eyJ[A-Za-z0-9_-]{20,}\.[A-Za-z0-9_-]{20,}", token("mapbox_token")),
    Detector("facebook_token", r"\bEAA[A-Za-z0-9]{90,}", token("facebook_token", 3.0)),
    Detector(
        "twitter_bearer_token", r"\bAAAAAAAAAAAAAAAAAAAAA[A-Za-z0-9%]{30,}", token("twitter_bearer_token")
    ),
    Detector("adafruit_key", r"\baio_[A-Za-z0-9]{28}\b", token("adafruit_key", 3.0)),
    Detector("easypost_token", r"\bEZ[AT]K[a-z0-9]{54}\b", token("easypost_token")),
    Detector(
        "planetscale_token", r"\bpscale_(?:tkn|pw|oauth)_[A-Za-z0-9_.=-]{32,64}", token("planetscale_token")
    ),
    Detector("salesforce_token", r"\b00D[A-Za-z0-9]{12,15}![A-Za-z0-9._]{80,}", token("salesforce_token")),
    Detector("cratesio_token", r"\bcio[A-Za-z0-9]{32}\b", token("cratesio_token", 3.5)),
    Detector("doppler_token", r"\bdp\.[a-z]{2,5}\.[A-Za-z0-9]{40,}\b", token("doppler_token")),
    Detector(
        "sumologic_access_id",
        r"(?i:sumo)[A-Za-z0-9_.-]*(?i:id)\W{0,3}[:=]\s*\\*[\"']?(su[A-Za-z0-9]{12})\b",
        token("sumologic_access_id"),
        1,
    ),
    Detector(
        "kubernetes_bootstrap_token",
        r"(?i:token)[\w.-]*[\"']?[ \t]*[:=][ \t]*[\"']?([a-z0-9]{6}\.[a-z0-9]{16})\b",
        token("kubernetes_bootstrap_token"),
        1,
    ),
    Detector(
        "bundler_credentials",
        r"\bBUNDLE_[A-Z0-9_]+__[A-Z]+[\"']?[ \t]*[:=][ \t]*[\"']?[^\s\"':;]+:([^\s\"';&]+)",
        auth_value("bundler_credentials", 4),
        1,
    ),
    Detector(
        "sonar_token",
        r"(?i:sonar[_.]?(?:login|token))[\"']?[ \t]*:*[?]?=?[ \t]*[\"']?((?:sq[pua]_)?[A-Za-z0-9]{40})\b",
        token("sonar_token"),
        1,
    ),
    Detector(
        "sourcegraph_token",
        r"(?i:sourcegraph)[A-Za-z0-9_.-]*[\"']?[ \t]*[:=][ \t]*[\"']?([a-fA-F0-9]{40})\b",
        token("sourcegraph_token"),
        1,
    ),
    Detector(
        "codeclimate_reporter_id",
        r"\bCC_TEST_REPORTER_ID[\"']?[ \t]*[:=][ \t]*[\"']?([a-f0-9]{64})\b",
        token("codeclimate_reporter_id"),
        1,
    ),
    Detector(
        "facebook_app_token", r"\b\d+\|[A-Za-z0-9_-]{27}\b", digits_then("facebook_app_token", "|", 15, 16)
    ),
    Detector("azure_devops_pat", r"\b[A-Za-z0-9]+AZDO[A-Za-z0-9]{4}\b", sized("azure_devops_pat", 84, 84)),
    # `vault operator unseal <key>` and `Unseal Key 1: <key>` (base64 of 32 bytes)
    Detector(
        "vault_unseal_key",
        r"(?i:\bunseal(?:[ \t_-]*key(?:[ \t_-]*\d+)?[ \t]*[:=])?)[ \t]*[\"']?([A-Za-z0-9+/]{40,}={0,2})",
        token("vault_unseal_key"),
        1,
    ),
    Detector(
        "okta_token",
        r"(?:\bSSWS[ \t]+|(?i:okta)[A-Za-z0-9_.-]*[\"']?[ \t]*[:=][ \t]*[\"']?)(00[A-Za-z0-9_-]{40})" + _END,
        token("okta_token", 3.0),
        1,
    ),
    # ThingsBoard device tokens sit in the path: `/api/v1/<token>/telemetry`
    Detector(
        "thingsboard_token",
        r"/api/v1/([A-Za-z0-9]{20})/(?:telemetry|attributes|rpc|claim)\b",
        token("thingsboard_token"),
        1,
    ),
    Detector(
        "teams_webhook",
        r"https?:\\?/\\?/outlook\.office(?:365)?\.com\\?/webhook(?:b2)?\\?/[A-Za-z0-9@/._\\-]{40,}",
        token("teams_webhook"),
    ),
    Detector("truenas_api_key", r"\b\d+-[A-Za-z0-9]{64}\b", digits_then("truenas_api_key", "-", 1, 4)),
    Detector("twitch_stream_key", r"\blive_\d+_[A-Za-z0-9]{30}\b", token("twitch_stream_key")),
    Detector(
        "softlayer_api_key",
        r"softlayer\.com\\?/soap\\?/v3(?:\.1)?\\?/([a-z0-9]{64})\b",
        token("softlayer_api_key"),
        1,
    ),
    Detector(
        "basic_auth",
        r"(?:\s|^)-u[ \t]+[^\s]+[ \t]+-p[ \t]*([^\s\"'-][^\s\"']*)",
        short_flag_password,
        1,
    ),
    # Tokens without a provider prefix
    Detector(
        "jwt",
        r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}(?:\.[A-Za-z0-9_-]*){0,3}",
        token("jwt"),
    ),
    Detector(
        "password_hash",
        r"(?:\$2[abxy]?\$\d\d\$[./A-Za-z0-9]{53}|\$(?:1|5|6|8|9|md5|apr1|y|gy|7)\$[./A-Za-z0-9$=+-]{8,}|\$argon2(?:id|i|d)\$[A-Za-z0-9=$,+/.-]{20,}|\$krb5(?:asrep|tgs)\$[^\s\"'`]{20,}|\$(?:pbkdf2|scrypt)[A-Za-z0-9-]*\$[A-Za-z0-9$./+=-]{20,})",
        token("password_hash"),
    ),
)
