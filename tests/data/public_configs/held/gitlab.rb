  # gitlab_rails['dir'] = "/var/opt/gitlab/gitlab-rails"
  # gitlab_rails['log_directory'] = "/var/log/gitlab/gitlab-rails"
  # gitlab_rails['log_group'] = nil
  
N #### Change the initial default admin password and shared runner registration tokens.
  ####! **Only applicable on initial setup, changing these settings after database
  ####!   is created and seeded won't yield any change.**
C gitlab_rails['initial_root_password'] = "«Granite-Otter-Lamp-93»"
C gitlab_rails['initial_shared_runners_registration_token'] = "«GR1348941KwjMLFAbdxqspT2Y-DBR»"
  
  ### Product Usage Data
  # This setting enables product usage data in the GitLab instance.
  # It will be read on initial installation only. Once GitLab is up and running,
  # this setting should be toggled from the admin pages in the UI.
  # gitlab_rails['initial_gitlab_product_usage_data'] = nil
  
N #### Toggle if root password should be printed to STDOUT during initialization
  # gitlab_rails['display_initial_root_password'] = false
  
N #### Toggle if initial root password should be written to /etc/gitlab/initial_root_password
N gitlab_rails['store_initial_root_password'] = false
  
  #### Set path to an initial license to be used while bootstrapping GitLab.
  ####! **Only applicable on initial setup, future license updates need to be done via UI.
  ####! Updating the file specified in this path won't yield any change after the first reconfigure run.
  # gitlab_rails['initial_license_file'] = '/etc/gitlab/company.gitlab-license'
  
  ####! Enable or disable automatic database migrations
  # gitlab_rails['auto_migrate'] = true
  
  ####! This is advanced feature used by large gitlab deployments where loading
  ####! whole RAILS env takes a lot of time.
  # gitlab_rails['rake_cache_clear'] = true
  
  ### GitLab database settings
  ###! Docs: https://docs.gitlab.com/omnibus/settings/database.html
  ###! **Only needed if you use an external database.**
  gitlab_rails['db_adapter'] = "postgresql"
  gitlab_rails['db_encoding'] = "unicode"
  # gitlab_rails['db_collation'] = nil
  gitlab_rails['db_database'] = "gitlabhq_production"
N gitlab_rails['db_username'] = "gitlab"
C gitlab_rails['db_password'] = "«pgGitlab_4e7Rk!2Vs»"
  gitlab_rails['db_host'] = "10.0.12.40"
  gitlab_rails['db_port'] = 5432
  # gitlab_rails['db_socket'] = nil
  # gitlab_rails['db_sslmode'] = nil
  # gitlab_rails['db_sslcompression'] = 0
  # gitlab_rails['db_sslrootcert'] = nil
  # gitlab_rails['db_sslcert'] = nil
N # gitlab_rails['db_sslkey'] = nil
  # gitlab_rails['db_prepared_statements'] = false
  # gitlab_rails['db_statements_limit'] = 1000
  # gitlab_rails['db_connect_timeout'] = nil
  # gitlab_rails['db_keepalives'] = nil
  # gitlab_rails['db_keepalives_idle'] = nil
  # gitlab_rails['db_keepalives_interval'] = nil
  # gitlab_rails['db_keepalives_count'] = nil
  # gitlab_rails['db_tcp_user_timeout'] = nil
  # gitlab_rails['db_application_name'] = nil
  # gitlab_rails['db_database_tasks'] = true
  
  ##! Command to generate extra database configuration
  # gitlab_rails['db_extra_config_command'] = nil
  
  ### Gitlab decomposed database settings
  ###! Docs: https://docs.gitlab.com/omnibus/settings/database.html
  # gitlab_rails['databases']['main']['db_database'] = 'gitlabhq_production'
  # gitlab_rails['databases']['main']['database_tasks'] = true
  # gitlab_rails['databases']['ci']['enable'] = true
  # gitlab_rails['databases']['ci']['db_database'] = 'gitlabhq_production'
  # gitlab_rails['databases']['ci']['database_tasks'] = false
  
  ### GitLab ClickHouse connection settings
  ###! EXPERIMENTAL
  gitlab_rails['clickhouse_databases']['main']['database'] = 'gitlab_clickhouse_main'
  gitlab_rails['clickhouse_databases']['main']['url'] = 'https://clickhouse.internal:8443'
N gitlab_rails['clickhouse_databases']['main']['username'] = 'gitlab'
C gitlab_rails['clickhouse_databases']['main']['password'] = '«ch-Plover-8810»'
  
  ### GitLab Managed Settings
  ###! Settings listed here override the value stored in the database.
  ###! They cannot be changed from the Admin UI or API.
  ###! Docs: https://docs.gitlab.com/omnibus/settings/configuration.html#managed-settings
  # gitlab_rails['managed_settings']['installation']['managed_by'] = 'GitLab Omnibus'
  # gitlab_rails['managed_settings']['settings'] = {
  #   'sidekiq_timezone_override' => 'Europe/London'
  # }
  
  ### GitLab Redis settings
  ###! Connect to your own Redis instance
  ###! Docs: https://docs.gitlab.com/omnibus/settings/redis.html
  
  #### Redis TCP connection
  gitlab_rails['redis_host'] = "10.0.12.41"
  # gitlab_rails['redis_port'] = 6379
  # gitlab_rails['redis_ssl'] = false
C gitlab_rails['redis_password'] = "«vR2nT8qLx5WcJ3hD»"
