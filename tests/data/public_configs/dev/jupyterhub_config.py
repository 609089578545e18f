  """sample jupyterhub config file for testing
  
  configures jupyterhub with dummyauthenticator and simplespawner
  to enable testing without administrative privileges.
  """
  
  c = get_config()  # noqa
  c.Application.log_level = 'DEBUG'
  
  from oauthenticator.azuread import AzureAdOAuthenticator
  import os
  
  c.JupyterHub.authenticator_class = AzureAdOAuthenticator
  
N c.AzureAdOAuthenticator.client_id = os.getenv("AAD_CLIENT_ID")
N c.AzureAdOAuthenticator.client_secret = os.getenv("AAD_CLIENT_SECRET")
  c.AzureAdOAuthenticator.oauth_callback_url = os.getenv("AAD_CALLBACK_URL")
N c.AzureAdOAuthenticator.tenant_id = os.getenv("AAD_TENANT_ID")
  c.AzureAdOAuthenticator.username_claim = "email"
  c.AzureAdOAuthenticator.authorize_url = os.getenv("AAD_AUTHORIZE_URL")
N c.AzureAdOAuthenticator.token_url = os.getenv("AAD_TOKEN_URL")
  c.Authenticator.authenticator_managed_groups = True
  c.Authenticator.refresh_pre_spawn = True
  
N # Optionally set a global password that all users must use
C c.DummyAuthenticator.password = "«Shared-Notebook-Key-51»"
  
  from jupyterhub.spawner import SimpleLocalProcessSpawner
  
  c.JupyterHub.spawner_class = SimpleLocalProcessSpawner
