  #####################################
  # Email Configuration #
  #####################################
  #
  # This is used for emailing rendered graphs. The default backend is SMTP.
  EMAIL_BACKEND = 'django.core.mail.backends.smtp.EmailBackend'
  #
  # To drop emails on the floor, enable the Dummy backend instead.
  #EMAIL_BACKEND = 'django.core.mail.backends.dummy.EmailBackend'
  
  EMAIL_HOST = 'smtp.metrics.example'
  EMAIL_PORT = 587
N EMAIL_HOST_USER = 'graphite-mailer'
C EMAIL_HOST_PASSWORD = '«Tallow-Beacon-913»'
  EMAIL_USE_TLS = True
  
  
  #####################################
  # Authentication Configuration #
  #####################################
  #
  ## LDAP / ActiveDirectory authentication setup
N USE_LDAP_AUTH = True
  #LDAP_SERVER = "ldap.mycompany.com"
  #LDAP_PORT = 389
  #LDAP_USE_TLS = False
  
  ## Manual URI / query setup
  LDAP_URI = "ldaps://ldap.mycompany.com:636"
  LDAP_SEARCH_BASE = "OU=users,DC=mycompany,DC=com"
N LDAP_BASE_USER = "CN=graphite_ro,OU=service,DC=mycompany,DC=com"
C LDAP_BASE_PASS = "«Quartz-Fennel-2718»"
  LDAP_USER_QUERY = "(sAMAccountName=%s)"  #For Active Directory use "(sAMAccountName=%s)"
  
N # User DN template to use for binding (and authentication) against the
  # LDAP server. %(username) is replaced with the username supplied at
  # graphite login.
  #LDAP_USER_DN_TEMPLATE = "CN=%(username)s,OU=users,DC=mycompany,DC=com"
  
  # If you want to further customize the ldap connection options you should
  # directly use ldap.set_option to set the ldap module's global options.
  # For example:
  #
  #import ldap
  #ldap.set_option(ldap.OPT_X_TLS_REQUIRE_CERT, ldap.OPT_X_TLS_ALLOW) # Use ldap.OPT_X_TLS_DEMAND to force TLS
  #ldap.set_option(ldap.OPT_REFERRALS, 0) # Enable for Active Directory
  #ldap.set_option(ldap.OPT_X_TLS_CACERTDIR, "/etc/ssl/ca")
  #ldap.set_option(ldap.OPT_X_TLS_CERTFILE, "/etc/ssl/mycert.pem")
  #ldap.set_option(ldap.OPT_X_TLS_KEYFILE, "/etc/ssl/mykey.pem")
  #ldap.set_option(ldap.OPT_DEBUG_LEVEL, 65535) # To enable verbose debugging
  # See http://www.python-ldap.org/ for further details on these options.
  
  ## REMOTE_USER authentication. See: https://docs.djangoproject.com/en/dev/howto/auth-remote-user/
  #USE_REMOTE_USER_AUTHENTICATION = True
  
  # Override the URL for the login link (e.g. for django_openid_auth)
  #LOGIN_URL = '/account/login'
  
  
  ###############################
  # Authorization for Dashboard #
  ###############################
  # By default, there is no security on dashboards - any user can add, change or delete them.
  # This section provides 3 different authorization models, of varying strictness.
  
  # If set to True, users must be logged in to save or delete dashboards. Defaults to False
  #DASHBOARD_REQUIRE_AUTHENTICATION = True
  
  # If set to the name of a user group, dashboards can be saved and deleted by any user in this
  # group.  Groups can be set in the Django Admin app, or in LDAP.  Defaults to None.
  # NOTE: Ignored if DASHBOARD_REQUIRE_AUTHENTICATION is not set
  #DASHBOARD_REQUIRE_EDIT_GROUP = 'dashboard-editors-group'
  
  # If set to True, dashboards can be saved or deleted by any user having the appropriate
  # (change or delete) permission (as set in the Django Admin app).  Defaults to False
  # NOTE: Ignored if DASHBOARD_REQUIRE_AUTHENTICATION is not set
  #DASHBOARD_REQUIRE_PERMISSIONS = True
  
  
  ##########################
  # Database Configuration #
  ##########################
  #
  # By default sqlite is used. If you cluster multiple webapps you will need
  # to setup an external database (such as MySQL) and configure all of the webapp
  # instances to use the same database. Note that this database is only used to store
  # Django models such as saved graphs, dashboards, user preferences, etc.
  # Metric data is not stored here.
  #
  # DO NOT FORGET TO RUN MIGRATIONS AFTER SETTING UP A NEW DATABASE
  # http://graphite.readthedocs.io/en/latest/config-database-setup.html
  #
  #
  # The following built-in database engines are available:
  #  django.db.backends.postgresql_psycopg2
  #  django.db.backends.mysql
  #  django.db.backends.sqlite3
  #  django.db.backends.oracle
  #
  # The default is 'django.db.backends.sqlite3' with file 'graphite.db'
  # located in STORAGE_DIR
  #
  DATABASES = {
      'default': {
          'NAME': 'graphite',
          'ENGINE': 'django.db.backends.postgresql_psycopg2',
N         'USER': 'graphite',
C         'PASSWORD': '«Vesper-Ingot-3381»',
          'HOST': 'pg.metrics.example',
          'PORT': '5432'
      }
  }
  #
