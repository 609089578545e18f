  import Config
  config :my_app, MyApp.Repo,
    username: "postgres",
C   password: "«postgres»",
    hostname: "localhost"
  config :my_app, MyAppWeb.Endpoint,
C   secret_key_base: "«ex-secret-key-base-abcdef0123456789»",
N   secret_key_base: System.get_env("SECRET_KEY_BASE"),
C   live_view: [signing_salt: "«lv-salt-1»"]
