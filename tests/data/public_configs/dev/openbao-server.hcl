  # Copyright (c) HashiCorp, Inc.
  # SPDX-License-Identifier: MPL-2.0
  
  disable_cache = true
  log_requests_level = "Basic"
  
  ui = true
  
  api_addr = "top_level_api_addr"
  cluster_addr = "top_level_cluster_addr"
  
  listener "tcp" {
    address = "127.0.0.1:443"
  }
  
  backend "consul" {
    advertise_addr = "foo"
C   token = "«b1c6e0f4-7a2d-4e91-9c3b-5d8f2a6e10c7»"
  }
  
  ha_backend "consul" {
    bar = "baz"
    advertise_addr = "snafu"
    disable_clustering = "true"
C   token = "«e4a9d2c7-0b3f-48a6-a15e-9f7c3d2b8e41»"
  }
  
  service_registration "consul" {
C   token = "«73f0c8b2-d6e1-4a5f-8b9c-2e1d0a7f6c35»"
  }
  
  telemetry {
    statsd_address = "bar"
C   circonus_api_token = "«0c9f7e3a-5b21-4d88-b6e2-a1f4c3d7e905»"
    metrics_prefix = "pfx"
    usage_gauge_period = "5m"
    maximum_gauge_cardinality = 100
  }
  
  sentinel {
    additional_enabled_modules = ["http"]
  }
  
  seal "awskms" {
    region     = "us-east-1"
N   access_key = "AKIAIOSFODNN7EXAMPLE"
C   secret_key = "«Qm7vT2xK9pLr4Zc8Wn1Bs6Hd3Fj5Gy0Ae/Ui+Ko»"
  }
  
  max_lease_ttl = "30d"
  default_lease_ttl = "365d"
  cluster_name = "testcluster"
  pid_file = "./pidfile"
  raw_storage_endpoint = true
  disable_sealwrap = true
  disable_sentinel_trace = true
