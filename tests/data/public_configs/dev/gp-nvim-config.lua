  -- Gp (GPT prompt) lua plugin for Neovim
  -- https://github.com/Robitx/gp.nvim/
  
  --------------------------------------------------------------------------------
  -- Default config
  --------------------------------------------------------------------------------
  
  ---@class GpConfig
  -- README_REFERENCE_MARKER_START
  local config = {
  	-- Please start with minimal config possible.
  	-- Just openai_api_key if you don't have OPENAI_API_KEY env set up.
  	-- Defaults change over time to improve things, options might get deprecated.
  	-- It's better to change only things where the default doesn't fit your needs.
  
  	-- required openai api key (string or table with command and arguments)
  	-- openai_api_key = { "cat", "path_to/openai_api_key" },
  	-- openai_api_key = { "bw", "get", "password", "OPENAI_API_KEY" },
N 	-- openai_api_key: "sk-...",
  	-- openai_api_key = os.getenv("env_name.."),
N 	openai_api_key = os.getenv("OPENAI_API_KEY"),
  
  	-- at least one working provider is required
  	-- to disable a provider set it to empty table like openai = {}
  	providers = {
  		-- secrets can be strings or tables with command and arguments
  		-- secret = { "cat", "path_to/openai_api_key" },
  		-- secret = { "bw", "get", "password", "OPENAI_API_KEY" },
N 		-- secret : "sk-...",
  		-- secret = os.getenv("env_name.."),
  		openai = {
  			disable = false,
  			endpoint = "https://api.openai.com/v1/chat/completions",
  			-- secret = os.getenv("OPENAI_API_KEY"),
  		},
  		azure = {
  			disable = true,
  			endpoint = "https://$URL.openai.azure.com/openai/deployments/{{model}}/chat/completions",
C 			secret = "«de3ff6b469b0a6ac6ac52af140087197»",
  		},
  		copilot = {
  			disable = true,
  			endpoint = "https://api.githubcopilot.com/chat/completions",
  			secret = {
  				"bash",
  				"-c",
N 				"cat ~/.config/github-copilot/apps.json | sed -e 's/.*oauth_token...//;s/\".*//'",
  			},
  		},
  		ollama = {
  			disable = true,
  			endpoint = "http://localhost:11434/api/chat",
N 			secret = "dummy_secret",
  		},
  		lmstudio = {
  			disable = true,
  			endpoint = "http://localhost:1234/v1/chat/completions",
N 			secret = "dummy_secret",
  		},
  		googleai = {
  			disable = true,
N 			endpoint = "https://generativelanguage.googleapis.com/v1beta/models/{{model}}:streamGenerateContent?key={{secret}}",
N 			secret = os.getenv("GOOGLEAI_API_KEY"),
  		},
  		pplx = {
  			disable = true,
  			endpoint = "https://api.perplexity.ai/chat/completions",
N 			secret = os.getenv("PPLX_API_KEY"),
  		},
  		anthropic = {
  			disable = true,
  			endpoint = "https://api.anthropic.com/v1/messages",
C 			secret = "«sk-ant-api03-thK3clMEJl7LnJXTDUUaj9DVsnbmgLUWkVfcjtwaPIWcTTBoq9NP1KrK0dSN8oPErnoXckI0EdAd»",
  		},
  	},
  
  	-- prefix for all commands
  	cmd_prefix = "Gp",
  	-- optional curl parameters (for proxy, etc.)
  	-- curl_params = { "--proxy", "http://X.X.X.X:XXXX" }
C 	curl_params = { "--proxy", "http://nvim-gp:«Tundra-Wick-5528»@10.20.0.5:3128" },
  
  	-- log file location
  	log_file = vim.fn.stdpath("log"):gsub("/$", "") .. "/gp.nvim.log",
N 	-- write sensitive data to log file for	debugging purposes (like api keys)
N 	log_sensitive = false,
