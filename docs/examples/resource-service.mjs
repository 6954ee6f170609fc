// resource-service.mjs: a small Node API that accepts lbauth access tokens, verified offline with
// the `jose` package (npm install jose; Node 20 or later). The same checks as lbauth.verify.
//
//   LBAUTH_ISSUER=http://127.0.0.1:8000 PORT=8102 node resource-service.mjs
import http from 'node:http';
import { createRemoteJWKSet, errors, jwtVerify } from 'jose';

const ISSUER = process.env.LBAUTH_ISSUER ?? 'http://127.0.0.1:8000'; // exactly as in the tokens' `iss`
const AUDIENCE = process.env.LBAUTH_AUDIENCE ?? ISSUER;               // lbauth's audience setting
const PORT = Number(process.env.PORT ?? 8102);
const PREFIX = 'lba_at_';
const LEEWAY = 30; // seconds of clock difference allowed on `exp` and `iat` (never more than 60)

async function getJson(url) {
  const response = await fetch(url, { headers: { Accept: 'application/json' }, signal: AbortSignal.timeout(5000) });
  if (!response.ok) throw new Error(`GET ${url}: HTTP ${response.status}`);
  return response.json();
}

// Discovery (RFC 8414 3.1): the metadata names the key set and lbauth's revocation feed.
const issuerUrl = new URL(ISSUER);
const metadata = await getJson(new URL(`/.well-known/oauth-authorization-server${issuerUrl.pathname.replace(/\/$/, '')}`, issuerUrl));
if (metadata.issuer !== ISSUER) throw new Error(`the metadata names another issuer: ${metadata.issuer}`);
// Keys by `kid`, fetched again every 5 minutes and on an unknown `kid` (at most every 10 s).
const jwks = createRemoteJWKSet(new URL(metadata.jwks_uri), { cacheMaxAge: 300_000, cooldownDuration: 10_000 });

// The revocation feed: refuse a grant's tokens issued up to its `revokedAt`, or one token by `jti`,
// until the entry's `expiresAt` (when every token it covers has expired).
const revokedGrants = new Map(); // gid -> { revokedAt, expiresAt }, in Unix seconds
const revokedJtis = new Map();   // jti -> expiresAt
let cursor;
const seconds = (iso) => Date.parse(iso) / 1000;

async function pollRevocations() {
  for (;;) {
    const url = new URL(metadata.revocation_feed_endpoint);
    if (cursor) url.searchParams.set('since', cursor); // only what came after the last answer
    const { data } = await getJson(url);
    for (const item of data.items) {
      if (item.grantId) revokedGrants.set(item.grantId, { revokedAt: seconds(item.revokedAt), expiresAt: seconds(item.expiresAt) });
      if (item.jti) revokedJtis.set(item.jti, seconds(item.expiresAt));
    }
    cursor = data.cursor;
    if (data.items.length === 0 || data.pollAfter > 0) return data.pollAfter || 2; // 0: more are waiting
  }
}

async function keepPolling() {
  let wait = 2;
  try {
    wait = await pollRevocations();
  } catch (err) {
    console.warn(`revocation feed poll failed: ${err.message}`); // alert on this: revocations wait
  }
  const now = Date.now() / 1000;
  for (const [gid, entry] of revokedGrants) if (entry.expiresAt <= now) revokedGrants.delete(gid);
  for (const [jti, expiresAt] of revokedJtis) if (expiresAt <= now) revokedJtis.delete(jti);
  setTimeout(keepPolling, wait * 1000);
}

class Refusal extends Error { // the lbauth error envelope and the RFC 6750 challenge
  constructor(status, subCode, message, challenge = 'Bearer error="invalid_token"') {
    super(message);
    Object.assign(this, { status, subCode, challenge });
  }
}
const invalid = (message = 'The access token is invalid.') => new Refusal(401, 'oauth2.token.invalid', message);

async function verify(authorization, scope) {
  if (!authorization) throw new Refusal(401, 'oauth2.token.missing', 'An access token is required.', 'Bearer');
  const token = /^Bearer +(\S+)$/i.exec(authorization.trim())?.[1];
  if (!token?.startsWith(PREFIX)) throw invalid(); // a bare JWT, a refresh or user token
  let payload;
  try {
    ({ payload } = await jwtVerify(token.slice(PREFIX.length), jwks, { // the prefix, stripped once
      issuer: ISSUER,
      audience: AUDIENCE,
      typ: 'at+jwt',                              // RFC 9068: not an ID token or another JWT
      algorithms: ['ES256', 'RS256', 'EdDSA'],    // never HMAC, never `none`
      requiredClaims: ['iss', 'aud', 'sub', 'client_id', 'scope', 'iat', 'exp', 'jti'],
      clockTolerance: LEEWAY,                     // checks `exp` (and `nbf`) against this host's clock
    }));
  } catch (err) {
    if (err instanceof errors.JWTExpired) throw new Refusal(401, 'oauth2.token.expired', 'The access token has expired.');
    if (err instanceof errors.JOSEError) throw invalid();
    throw err; // the key set could not be fetched: 503
  }
  if (payload.iat > Date.now() / 1000 + LEEWAY) throw invalid('The access token was issued in the future.');
  if (['sub', 'client_id', 'scope', 'jti'].some((claim) => typeof payload[claim] !== 'string')) throw invalid();
  const grant = revokedGrants.get(payload.gid);
  if (revokedJtis.has(payload.jti) || (grant && payload.iat <= grant.revokedAt)) {
    throw new Refusal(401, 'oauth2.token.revoked', 'The access token has been revoked.');
  }
  if (!payload.scope.split(' ').includes(scope)) {
    throw new Refusal(403, 'oauth2.scope.insufficient', 'The access token does not carry the scope this resource needs.',
      'Bearer error="insufficient_scope"');
  }
  return payload;
}

// Each route: the scope it needs, and its answer. claims.sub is the user, claims.client_id the app.
const ROUTES = {
  'GET /profile': ['userinfo', (claims) => ({ userId: claims.sub, appScopedUserId: claims.asu,
                                              clientId: claims.client_id, scope: claims.scope.split(' ') })],
  'GET /notes': ['chat.read', () => ({ items: [] })],
};

const server = http.createServer(async (request, response) => {
  const send = (status, body, headers = {}) => {
    response.writeHead(status, { 'Content-Type': 'application/json', ...headers }).end(JSON.stringify(body));
  };
  const route = ROUTES[`${request.method} ${request.url.split('?')[0]}`];
  if (!route) return send(404, { code: 404, message: 'Not found.', subCode: 'request.not_found' });
  try {
    const claims = await verify(request.headers.authorization, route[0]);
    send(200, { code: 0, data: route[1](claims) });
  } catch (err) {
    if (!(err instanceof Refusal)) {
      console.warn(`token check failed: ${err.message}`);
      return send(503, { code: 503, message: 'Try again later.', subCode: 'server.unavailable' }, { 'Retry-After': '5' });
    }
    send(err.status, { code: err.status, message: err.message, subCode: err.subCode }, { 'WWW-Authenticate': err.challenge });
  }
});

// The whole list before the first request (this fails if lbauth is unreachable), then keep polling.
setTimeout(keepPolling, (await pollRevocations()) * 1000);
server.listen(PORT, '127.0.0.1', () => console.log(`listening on http://127.0.0.1:${server.address().port}`));
