N -- For more information see https://prosody.im/doc/authentication
  
N authentication = "internal_hashed"
  
N -- Many authentication providers, including the default one, allow you to
  -- create user accounts via Prosody's admin interfaces. For details, see the
  -- documentation at https://prosody.im/doc/creating_accounts
  
  
  -- Storage
  -- Select the storage backend to use. By default Prosody uses flat files
  -- in its configured data directory, but it also supports more backends
  -- through modules. An "sql" backend is included by default, but requires
  -- additional dependencies. See https://prosody.im/doc/storage for more info.
  
  storage = "sql" -- Default is "internal"
  
  -- For the "sql" backend, you can uncomment *one* of the below to configure:
  --sql = { driver = "SQLite3", database = "prosody.sqlite" } -- Default. 'database' is the filename.
  --sql = { driver = "MySQL", database = "prosody", username = "prosody", password = "secret", host = "localhost" }
C sql = { driver = "PostgreSQL", database = "prosody", username = "prosody", password = "«Xmpp-Pg-2025!rx»", host = "db.chat.internal" }
  
  
  -- Archiving configuration
  -- If mod_mam is enabled, Prosody will store a copy of every message. This
  -- is used to synchronize conversations between multiple clients, even if
  -- they are offline. This setting controls how long Prosody will keep
  -- messages in the archive before removing them.
  
  archive_expires_after = "1w" -- Remove archived messages after 1 week
  
  -- You can also configure messages to be stored in-memory only. For more
  -- archiving options, see https://prosody.im/doc/modules/mod_mam
  
  
  -- Audio/video call relay (STUN/TURN)
  -- To ensure clients connected to the server can establish connections for
  -- low-latency media streaming (such as audio and video calls), it is
  -- recommended to run a STUN/TURN server for clients to use. If you do this,
  -- specify the details here so clients can discover it.
  -- Find more information at https://prosody.im/doc/turn
  
  -- Specify the address of the TURN service (you may use the same domain as XMPP)
  turn_external_host = "turn.chat.example.org"
  
N -- This secret must be set to the same value in both Prosody and the TURN server
C turn_external_secret = "«tK4pZ9wQ2vM7nR1xB8sL5cH3»"
  
  
  -- Logging configuration
  -- For advanced logging see https://prosody.im/doc/logging
  log = {
  	info = "prosody.log"; -- Change 'info' to 'debug' for verbose logging
  	error = "prosody.err";
  	-- "*syslog"; -- Uncomment this for logging to syslog
  	-- "*console"; -- Log to the console, useful for debugging when running in the foreground
  }
  
  
  -- Uncomment to enable statistics
  -- For more info see https://prosody.im/doc/statistics
  -- statistics = "internal"
  
  
  -- Certificates
  -- Every virtual host and component needs a certificate so that clients and
  -- servers can securely verify its identity. Prosody will automatically load
N -- certificates/keys from the directory specified here.
  -- For more information, including how to use 'prosodyctl' to auto-import certificates
  -- (from e.g. Let's Encrypt) see https://prosody.im/doc/certificates
  
  -- Location of directory to find certificates in (relative to main config file):
  certificates = "certs"
  
  ----------- Virtual hosts -----------
  -- You need to add a VirtualHost entry for each domain you wish Prosody to serve.
  -- Settings under each VirtualHost entry apply *only* to that host.
  
  VirtualHost "localhost"
  -- Prosody requires at least one enabled VirtualHost to function. You can
  -- safely remove or disable 'localhost' once you have added another.
  
  
  --VirtualHost "example.com"
  
  ------ Components ------
  -- You can specify components to add hosts that provide special services,
  -- like multi-user conferences, and transports.
  -- For more information on components, see https://prosody.im/doc/components
  
  ---Set up a MUC (multi-user chat) room server on conference.example.com:
  --Component "conference.example.com" "muc"
  --- Store MUC messages in an archive and allow users to access it
  --modules_enabled = { "muc_mam" }
  
  ---Set up a file sharing component
  --Component "share.example.com" "http_file_share"
  
  ---Set up an external component (default component port is 5347)
  --
  -- External components allow adding various services, such as gateways/
  -- bridges to non-XMPP networks and services. For more info
  -- see: https://prosody.im/doc/components#adding_an_external_component
  --
  Component "gateway.chat.example.org"
C 	component_secret = "«gw-c0mp0nent-7fa2»"
  
  
  ---------- End of the Prosody Configuration file ----------
  -- You usually **DO NOT** want to add settings here at the end, as they would
  -- only apply to the last defined VirtualHost or Component.
  --
  -- Settings for the global section should go higher up, before the first
  -- VirtualHost or Component line, while settings intended for specific hosts
  -- should go under the corresponding VirtualHost or Component line.
  --
  -- For more information see https://prosody.im/doc/configure
