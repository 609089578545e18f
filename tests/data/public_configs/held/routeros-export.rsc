  # software id = A0AA-AAA0
  #
  # model = L009UiGS
  # serial number = AA111AAAAAA
  /interface bridge
  add admin-mac=00:00:5E:00:53:00 auto-mac=no comment=defconf name=bridge port-cost-mode=short
  /interface vlan
  add interface=ether1 name=vlan6 vlan-id=6
  /interface pppoe-client
C add add-default-route=yes disabled=no interface=vlan6 name=pppoe-out1 password=«Ppp0e-Isp-4471» use-peer-dns=yes user=user
  /interface list
  add comment=defconf name=WAN
  add comment=defconf name=LAN
N /interface wireless security-profiles
N set [ find default=yes ] supplicant-identity=MikroTik
  /ip pool
  add name=default-dhcp ranges=192.0.2.0-192.0.2.254
  /ip dhcp-server
  add address-pool=default-dhcp interface=bridge lease-time=10m name=defconf
  /port
  set 0 name=serial0
N /snmp community
C add addresses=0.0.0.0/0 name=«Xr7-mon1tor» security=authorized
  /interface bridge port
  add bridge=bridge comment=defconf interface=ether2 internal-path-cost=10 path-cost=10
  add bridge=bridge comment=defconf interface=ether3 internal-path-cost=10 path-cost=10
  add bridge=bridge comment=defconf interface=ether4 internal-path-cost=10 path-cost=10
  add bridge=bridge comment=defconf interface=ether5 internal-path-cost=10 path-cost=10
  add bridge=bridge comment=defconf interface=ether6 internal-path-cost=10 path-cost=10
  add bridge=bridge comment=defconf interface=ether7 internal-path-cost=10 path-cost=10
  add bridge=bridge comment=defconf interface=ether8 internal-path-cost=10 path-cost=10
  add bridge=bridge comment=defconf interface=sfp1 internal-path-cost=10 path-cost=10
  /ip firewall connection tracking
  set udp-timeout=10s
  /ip neighbor discovery-settings
  set discover-interface-list=LAN
  /ip settings
  set max-neighbor-entries=14336
  /ipv6 settings
  set max-neighbor-entries=7168
  /interface list member
  add comment=defconf interface=bridge list=LAN
  add comment=defconf interface=ether1 list=WAN
  add interface=pppoe-out1 list=WAN
  /ip address
  add address=192.0.2.1/24 comment=defconf interface=bridge network=192.0.2.0
  /ip dhcp-client
  add comment=defconf interface=ether1
  /ip dhcp-server network
  add address=192.0.2.0/24 comment=defconf dns-server=192.0.2.1 gateway=192.0.2.1
  /ip dns
  set allow-remote-requests=yes
  /ip dns static
  add address=192.0.2.1 comment=defconf name=router.lan
  /ip firewall address-list
  add address=198.51.100.1 list="office"
  add address=198.51.100.2 list="nms"
  /ip firewall filter
  add action=accept chain=input comment="defconf: accept established,related,untracked" connection-state=established,related,untracked
  add action=drop chain=input comment="defconf: drop invalid" connection-state=invalid
  add action=accept chain=input comment="defconf: accept ICMP" protocol=icmp
  add action=accept chain=input comment="Remote MGTM" in-interface-list=WAN src-address-list="office"
  add action=accept chain=input in-interface-list=WAN src-address-list="nms"
  add action=accept chain=input comment="defconf: accept to local loopback (for CAPsMAN)" dst-address=127.0.0.1
  add action=drop chain=input comment="defconf: drop all not coming from LAN" in-interface-list=!LAN
  add action=accept chain=forward comment="defconf: accept in ipsec policy" ipsec-policy=in,ipsec
  add action=accept chain=forward comment="defconf: accept out ipsec policy" ipsec-policy=out,ipsec
  add action=fasttrack-connection chain=forward comment="defconf: fasttrack" connection-state=established,related hw-offload=yes
  add action=accept chain=forward comment="defconf: accept established,related, untracked" connection-state=established,related,untracked
  add action=drop chain=forward comment="defconf: drop invalid" connection-state=invalid
  add action=drop chain=forward comment="defconf: drop all from WAN not DSTNATed" connection-nat-state=!dstnat connection-state=new in-interface-list=WAN
  /ip firewall nat
  add action=masquerade chain=srcnat comment="defconf: masquerade" ipsec-policy=out,none out-interface-list=WAN
  /ipv6 firewall address-list
  add address=::/128 comment="defconf: unspecified address" list=bad_ipv6
  add address=::1/128 comment="defconf: lo" list=bad_ipv6
  add address=fec0::/10 comment="defconf: site-local" list=bad_ipv6
  add address=::ffff:0.0.0.0/96 comment="defconf: ipv4-mapped" list=bad_ipv6
  add address=::/96 comment="defconf: ipv4 compat" list=bad_ipv6
  add address=100::/64 comment="defconf: discard only " list=bad_ipv6
  add address=2001:db8::/32 comment="defconf: documentation" list=bad_ipv6
  add address=2001:10::/28 comment="defconf: ORCHID" list=bad_ipv6
  add address=3ffe::/16 comment="defconf: 6bone" list=bad_ipv6
  /ipv6 firewall filter
  add action=accept chain=input comment="defconf: accept established,related,untracked" connection-state=established,related,untracked
  add action=drop chain=input comment="defconf: drop invalid" connection-state=invalid
  add action=accept chain=input comment="defconf: accept ICMPv6" protocol=icmpv6
  add action=accept chain=input comment="defconf: accept UDP traceroute" port=33434-33534 protocol=udp
  add action=accept chain=input comment="defconf: accept DHCPv6-Client prefix delegation." dst-port=546 protocol=udp src-address=fe80::/10
  add action=accept chain=input comment="defconf: accept IKE" dst-port=500,4500 protocol=udp
  add action=accept chain=input comment="defconf: accept ipsec AH" protocol=ipsec-ah
  add action=accept chain=input comment="defconf: accept ipsec ESP" protocol=ipsec-esp
  add action=accept chain=input comment="defconf: accept all that matches ipsec policy" ipsec-policy=in,ipsec
  add action=drop chain=input comment="defconf: drop everything else not coming from LAN" in-interface-list=!LAN
  add action=accept chain=forward comment="defconf: accept established,related,untracked" connection-state=established,related,untracked
  add action=drop chain=forward comment="defconf: drop invalid" connection-state=invalid
  add action=drop chain=forward comment="defconf: drop packets with bad src ipv6" src-address-list=bad_ipv6
  add action=drop chain=forward comment="defconf: drop packets with bad dst ipv6" dst-address-list=bad_ipv6
  add action=drop chain=forward comment="defconf: rfc4890 drop hop-limit=1" hop-limit=equal:1 protocol=icmpv6
  add action=accept chain=forward comment="defconf: accept ICMPv6" protocol=icmpv6
  add action=accept chain=forward comment="defconf: accept HIP" protocol=139
  add action=accept chain=forward comment="defconf: accept IKE" dst-port=500,4500 protocol=udp
  add action=accept chain=forward comment="defconf: accept ipsec AH" protocol=ipsec-ah
  add action=accept chain=forward comment="defconf: accept ipsec ESP" protocol=ipsec-esp
  add action=accept chain=forward comment="defconf: accept all that matches ipsec policy" ipsec-policy=in,ipsec
  add action=drop chain=forward comment="defconf: drop everything else not coming from LAN" in-interface-list=!LAN
  /snmp
C set contact=user enabled=yes location="Riga, LATIVA" trap-community=«Xr7-mon1tor»
