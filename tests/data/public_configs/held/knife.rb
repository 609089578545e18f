  berkshelf_path										'kitchen'
  cookbook_path    									['~/.berkshelf/cookbooks', 'kitchen/site-cookbooks']
  data_bag_path    									'kitchen/data_bags'
N encrypted_data_bag_secret 				'.databag_secret'
  environment_path 									'kitchen/environments'
  node_path        									'kitchen/nodes'
  role_path       									'kitchen/roles'
  ssl_verify_mode 									:verify_peer
  
C knife[:aws_access_key_id]	=				'«AKIAV7QXN2RW4LJ8TZPK»'
C knife[:aws_secret_access_key] =		'«b9QhT2vXw+Lr8mK3pZc0Yd7NfE5sGj1uA4oRiW6e»'
  # Optional if you're using Amazon's STS
N #knife[:aws_session_token] = 			ENV['AWS_SESSION_TOKEN']
