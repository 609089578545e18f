  #!/usr/bin/env bash
  # deploy environment
C export DATABASE_PASSWORD="«Winter2024»"
C export GITHUB_TOKEN=«ghp_R8kq2LmN4pXz7Vb1Tc9Yh3Fd6Ws0Ja5Ue8Io»
C export VAULT_TOKEN='«hvs.CAESIJ2kq8f»'
C declare -x ADMIN_PASS=«letmein»
C readonly API_SECRET="«shhh-its-a-secret»"
N export DATABASE_PASSWORD_FILE="$HOME/.config/db/password"
N export GITHUB_TOKEN="${GITHUB_TOKEN:-}"
N export VAULT_TOKEN=$(vault print token)
N export SSH_KEY_PATH=~/.ssh/id_ed25519
N export API_SECRET="$(cat /run/secrets/api)"
  export PATH="$HOME/bin:$PATH"
