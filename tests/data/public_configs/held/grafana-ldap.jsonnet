  local kp =
    (import 'kube-prometheus/main.libsonnet') +
    {
      values+:: {
        common+: {
          namespace: 'monitoring',
        },
        grafana+: {
          config+: {
            sections: {
              'auth.ldap': {
                enabled: true,
N               config_file: '/etc/grafana/ldap.toml',
                allow_sign_up: true,
              },
            },
          },
          ldap: |||
            [[servers]]
            host = "ldap.corp.example"
            port = 389
            use_ssl = false
            start_tls = false
            ssl_skip_verify = false
  
N           bind_dn = "cn=grafana-bind,ou=services,dc=example,dc=com"
C           bind_password = '«Kelp-Orbit-Saddle-64»'
  
            search_filter = "(cn=%s)"
            search_base_dns = ["dc=example,dc=com"]
          |||,
        },
      },
    };
  
  { ['grafana-' + name]: kp.grafana[name] for name in std.objectFields(kp.grafana) }
