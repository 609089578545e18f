  <?php
C $cfg['blowfish_secret'] = '«pma-blowfish-secret-32-chars-long»';
  $i = 0;
  $i++;
  $cfg['Servers'][$i]['user'] = 'pma';
C $cfg['Servers'][$i]['password'] = '«pmapass»';
C $cfg['Servers'][$i]['controlpass'] = '«ctrl»';
N $cfg['Servers'][$i]['auth_type'] = 'cookie';
