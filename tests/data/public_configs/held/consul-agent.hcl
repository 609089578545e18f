  data_dir = "data_agent/"
  log_level = "INFO"
  node_name = "node-1"
  server = false,
C encrypt = "«mCuA0CbPYBy1cVlIBuTFrK6M9eywg7qkO6SV1UT4/pg=»",
  
  ui_config  {
    enabled = false,
  },
  
  auto_encrypt {
    tls = true
  },
  tls {
    defaults {
N     ca_file = "consul-agent-ca.pem",
      verify_incoming = true,
      verify_outgoing = true    
    },
  }
N acl {
N   tokens {
C     agent  = "«1c43185e-ff34-4447-8bb4-876a190b488f»"
    }
  }
  
