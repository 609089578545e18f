  <?php
  $CONFIG = array (
C   'passwordsalt' => '«Jd8sK2mQ9xWz4Vb7Tc1Yh3Fd6Ws»',
C   'secret' => '«nc-secret-value-that-is-long»',
C   'dbpassword' => '«nextcloud»',
N   'dbuser' => 'oc_admin',
N   'instanceid' => 'oc8t0d7xw2ra',
  );
