  { pkgs, ... }:
  
  let
    port = 1888;
    tlsPort = 1889;
    anonPort = 1890;
C   password = "«Lantern-Quay-7731»";
C   hashedPassword = "«$7$101$QQyQgkeoll94OdEq$NBr/tiGW2kfVy3DYxiNCEc0jbyA3Xw0ofpH8/cjfZNd6dB+UOkYU5LSBXB/UrbRYLtSaANaE5DEdVqm9kgs2+A==»";
    topic = "test/foo";
  
    snakeOil =
      pkgs.runCommand "snakeoil-certs"
        {
          buildInputs = [ pkgs.gnutls.bin ];
          caTemplate = pkgs.writeText "snakeoil-ca.template" ''
            cn = server
            expiration_days = -1
            cert_signing_key
            ca
          '';
          certTemplate = pkgs.writeText "snakeoil-cert.template" ''
            cn = server
            expiration_days = -1
            tls_www_server
            encryption_key
            signing_key
          '';
          userCertTemplate = pkgs.writeText "snakeoil-user-cert.template" ''
            organization = snakeoil
            cn = client1
            expiration_days = -1
            tls_www_client
            encryption_key
            signing_key
          '';
        }
        ''
          mkdir "$out"
  
          certtool -p --bits 2048 --outfile "$out/ca.key"
          certtool -s --template "$caTemplate" --load-privkey "$out/ca.key" \
                      --outfile "$out/ca.crt"
          certtool -p --bits 2048 --outfile "$out/server.key"
          certtool -c --template "$certTemplate" \
                      --load-ca-privkey "$out/ca.key" \
                      --load-ca-certificate "$out/ca.crt" \
                      --load-privkey "$out/server.key" \
                      --outfile "$out/server.crt"
  
          certtool -p --bits 2048 --outfile "$out/client1.key"
          certtool -c --template "$userCertTemplate" \
                      --load-privkey "$out/client1.key" \
                      --load-ca-privkey "$out/ca.key" \
                      --load-ca-certificate "$out/ca.crt" \
                      --outfile "$out/client1.crt"
        '';
  
  in
  {
    name = "mosquitto";
    meta = with pkgs.lib; {
      maintainers = with maintainers; [ peterhoeg ];
    };
  
    nodes =
      let
        client =
          { pkgs, ... }:
          {
            environment.systemPackages = with pkgs; [ mosquitto ];
          };
      in
      {
        server =
          { pkgs, ... }:
          {
            networking.firewall.allowedTCPPorts = [
              port
              tlsPort
              anonPort
            ];
            networking.useNetworkd = true;
            services.mosquitto = {
              enable = true;
              settings = {
                sys_interval = 1;
              };
              listeners = [
                {
                  inherit port;
                  users = {
                    password_store = {
N                     inherit password;
                    };
                    password_file = {
N                     passwordFile = pkgs.writeText "mqtt-password" password;
                    };
                    hashed_store = {
N                     inherit hashedPassword;
                    };
                    hashed_file = {
N                     hashedPasswordFile = pkgs.writeText "mqtt-hashed-password" hashedPassword;
                    };
  
                    reader = {
                      inherit password;
                      acl = [
                        "read ${topic}"
                        "read $SYS/#" # so we always have something to read
                      ];
                    };
                    writer = {
                      inherit password;
                      acl = [ "write ${topic}" ];
                    };
                  };
                }
                {
                  port = tlsPort;
                  users.client1 = {
                    acl = [ "read $SYS/#" ];
                  };
                  settings = {
                    cafile = "${snakeOil}/ca.crt";
                    certfile = "${snakeOil}/server.crt";
                    keyfile = "${snakeOil}/server.key";
                    require_certificate = true;
                    use_identity_as_username = true;
                  };
                }
                {
                  port = anonPort;
N                 omitPasswordAuth = true;
                  settings.allow_anonymous = true;
                  acl = [ "pattern read #" ];
                  users = {
                    anonWriter = {
N                     password = "<ignored>" + password;
                      acl = [ "write ${topic}" ];
                    };
                  };
                }
              ];
            };
          };
  
        client1 = client;
        client2 = client;
      };
