N set interfaces wireguard wg0 peer testpeer public-key 'b7wPxXWRxgB5uzfXa75B6EvhAa2K4wp+UayahIoo9iU='
C set interfaces wireguard wg0 private-key '«Ff0HGK1h3p46IkAPjuoRZU8W0duw8PS6k4YoKB5zTi8=»'
C set pki certificate openvpn_vtun3 private key '«MIIEvQIBADANBgkqhkiG9w0BAQEFAASCa3uTuGAdFHNpp+GcQWCPqN+YodOqjYIJxWIkmPy++OdxWXRP9IN1fKzxjWB5qVCY0QaSaX4UThSd6w/EADcYPeOFTqHQNLezK5HO/M/lOyM+ZG6OgyyCLx8t»'
C set protocols bgp neighbor 10.10.10.1 password '«bgp-md5-Tq81»'
  set service console-server device usb0b3p1.0 description 'devswitch'
  set service console-server device usb0b3p1.0 speed '9600'
  set service console-server device usb0b3p1.0 ssh port '3001'
  set service lldp interface eth0
  set service lldp interface eth1
  set service lldp snmp
  set service ntp allow-client address '0.0.0.0/0'
  set service ntp allow-client address '::/0'
  set service ntp server 10.10.10.1
C set service snmp community «n0cR3ad-fw1» authorization 'ro'
  set service snmp contact 'user@example.com'
  set service snmp oid-enable 'ip-route-table'
C set service snmp trap-target 10.10.10.10 community '«n0cR3ad-fw1»'
  set service ssh port '22'
  set system config-management commit-revisions '20'
  set system conntrack expect-table-size '2048'
  set system conntrack hash-size '32768'
  set system conntrack modules ftp
  set system conntrack modules h323
  set system conntrack modules nfs
  set system conntrack modules pptp
  set system conntrack modules sip
  set system conntrack modules sqlnet
  set system conntrack modules tftp
  set system conntrack table-size '524288'
  set system conntrack tcp half-open-connections '512'
  set system conntrack tcp loose 'enable'
  set system conntrack tcp max-retrans '3'
  set system conntrack timeout icmp '30'
  set system conntrack timeout other '600'
  set system conntrack timeout tcp close '10'
  set system conntrack timeout tcp close-wait '60'
  set system conntrack timeout tcp established '432000'
  set system conntrack timeout tcp fin-wait '120'
  set system conntrack timeout tcp last-ack '30'
  set system conntrack timeout tcp syn-recv '60'
  set system conntrack timeout tcp syn-sent '120'
  set system conntrack timeout tcp time-wait '120'
  set system conntrack timeout udp other '30'
  set system conntrack timeout udp stream '180'
  set system console device ttyS0 speed '115200'
  set system domain-name 'example.com'
  set system frr snmp bgpd
  set system host-name 'fw1'
  set system name-server '8.8.8.8'
  set system option ctrl-alt-delete 'reboot'
  set system option disable-usb-autosuspend
  set system option reboot-on-panic
  set system syslog global facility all level 'notice'
  set system syslog global facility local7 level 'debug'
  set system time-zone 'UTC'
  # some URL with password: http://user:Wq3rT8yU@domain.tld/
  # some URL with password: ftp://user:Lk9mN2bV@domain.tld/
  # some URL with password: https://user:Zx4cV7bN@domain.tld/
C set vpn ipsec authentication psk peer_1_2_3_4 secret '«V8s2kLp0QxR7mZ4wNc6T»'
