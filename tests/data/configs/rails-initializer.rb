  Rails.application.configure do
C   config.secret_key_base = '«rb-secret-key-base-0001»'
N   config.secret_key_base = ENV.fetch("SECRET_KEY_BASE")
  end
  Stripe.api_key = ENV["STRIPE_SECRET_KEY"]
  ActionMailer::Base.smtp_settings = {
    user_name: 'mailer',
C   password: '«rb-smtp-pw»',
C   :authentication_token => "«rb-auth-token-77»",
N   authentication: :plain,
  }
