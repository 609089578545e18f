  export const config = {
C   jwtSecret: "«ts-jwt-secret»",
C   stripeKey: `«sk_test_tsStripeKey123»`,
N   jwtSecret: process.env.JWT_SECRET ?? "",
N   apiKey: `${process.env.API_KEY}`,
  };
  interface Creds {
N   password: string;
N   token?: string | null;
  }
