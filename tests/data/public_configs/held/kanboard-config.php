  <?php
  
  /*******************************************************************/
  /* Rename this file to config.php if you want to change the values */
  /*                                                                 */
  /* Make sure all paths are absolute by using __DIR__ where needed  */
  /*******************************************************************/
  
  // Data folder (must be writeable by the web server user and absolute)
  define('DATA_DIR', __DIR__.DIRECTORY_SEPARATOR.'data');
  
  // Enable/Disable debug
  define('DEBUG', false);
  
  // Available log drivers: syslog, stderr, stdout, system or file
  define('LOG_DRIVER', 'system');
  
  // Log filename if the log driver is "file"
  define('LOG_FILE', DATA_DIR.DIRECTORY_SEPARATOR.'debug.log');
  
  // Plugins directory
  define('PLUGINS_DIR', __DIR__.DIRECTORY_SEPARATOR.'plugins');
  
  // Plugins directory URL
  define('PLUGIN_API_URL', 'https://kanboard.org/plugins.json');
  
  // Enable/Disable plugin installer (Disabled by default for security reasons)
  // There is no code review or any approval process to submit a plugin.
  // This is up to the Kanboard instance owner to validate if a plugin is legit.
  define('PLUGIN_INSTALLER', false);
  
  // Cache folder to use if cache driver is "file" (must be writeable by the web server user)
  define('CACHE_DIR', DATA_DIR.DIRECTORY_SEPARATOR.'cache');
  
  // Folder for uploaded files (must be writeable by the web server user)
  define('FILES_DIR', DATA_DIR.DIRECTORY_SEPARATOR.'files');
  
  // Enable/disable email configuration from the user interface
  define('MAIL_CONFIGURATION', true);
  
  // E-mail address used for the "From" header (notifications)
  define('MAIL_FROM', 'replace-me@kanboard.local');
  
  // E-mail address used for the "Bcc" header to send a copy of all notifications
  define('MAIL_BCC', '');
  
  // Mail transport available: "smtp", "sendmail", "mail" (PHP mail function)
  define('MAIL_TRANSPORT', 'smtp');
  
  // SMTP configuration to use when the "smtp" transport is chosen
  define('MAIL_SMTP_HOSTNAME', 'smtp.kanboard.example');
  define('MAIL_SMTP_PORT', 587);
N define('MAIL_SMTP_USERNAME', 'kanboard@kanboard.example');
C define('MAIL_SMTP_PASSWORD', '«Abacus-Tundra-4471»');
  define('MAIL_SMTP_HELO_NAME', null); // valid: null (default), or FQDN
  define('MAIL_SMTP_ENCRYPTION', 'tls'); // Valid values are null (not a string "null"), "ssl" or "tls"
  
  // Sendmail command to use when the transport is "sendmail"
  define('MAIL_SENDMAIL_COMMAND', '/usr/sbin/sendmail -bs');
  
  // Run automatically database migrations
  // If set to false, you will have to run manually the SQL migrations from the CLI during the next Kanboard upgrade
  // Do not run the migrations from multiple processes at the same time (example: web page + background worker)
  define('DB_RUN_MIGRATIONS', true);
  
  // Database driver: sqlite, mysql, postgres, odbc, dblib, or mssql (sqlite by default)
  define('DB_DRIVER', 'postgres');
  
  // Database username
N define('DB_USERNAME', 'kanboard');
  
N // Database password
C define('DB_PASSWORD', '«Marrow-Lichen-0812»');
  
  // Database hostname
  define('DB_HOSTNAME', 'pg.kanboard.example');
  
  // Database database name
  define('DB_NAME', 'kanboard');
  
  // Database custom port (null = default port)
  define('DB_PORT', null);
  
  // Mysql SSL key
  define('DB_SSL_KEY', null);
  
  // Mysql SSL certificate
  define('DB_SSL_CERT', null);
  
  // Mysql SSL CA
  define('DB_SSL_CA', null);
  
  // Mysql SSL server verification, set to false if you don't want the Mysql driver to validate the certificate CN
  define('DB_VERIFY_SERVER_CERT', null);
  
  // Timeout value for PDO attribute
  define('DB_TIMEOUT', null);
  
  // ODBC DSN (default: kanboard)
  define('DB_ODBC_DSN', 'kanboard');
  
  // Enable LDAP authentication (false by default)
  define('LDAP_AUTH', true);
  
  // LDAP server protocol, hostname and port URL (ldap[s]://hostname:port)
  define('LDAP_SERVER', 'ldaps://dc01.corp.example:636');
  
  // LDAP server port (389 by default)
  define('LDAP_PORT', 389);
  
  // By default, require certificate to be verified for ldaps:// style URL. Set to false to skip the verification
  define('LDAP_SSL_VERIFY', true);
  
  // Enable LDAP START_TLS
  define('LDAP_START_TLS', false);
  
  // By default Kanboard lowercase the ldap username to avoid duplicate users (the database is case sensitive)
  // Set to true if you want to preserve the case
  define('LDAP_USERNAME_CASE_SENSITIVE', false);
  
  // LDAP bind type: "anonymous", "user" or "proxy"
  define('LDAP_BIND_TYPE', 'proxy');
  
  // LDAP username to use with proxy mode
  // LDAP username pattern to use with user mode
N define('LDAP_USERNAME', 'CN=svc-kanboard,OU=Service Accounts,DC=corp,DC=example');
  
N // LDAP password to use for proxy mode
C define('LDAP_PASSWORD', '«Svc!Kanboard-Weld-57»');
  
