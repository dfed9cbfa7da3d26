// An independent verifier of dflash-guard's key signatures: sigstore-js (@sigstore/verify), offline,
// with the public key as the only trust material (no Fulcio, Rekor or TSA, as cosign's
// `verify-blob-attestation --key --insecure-ignore-tlog` does).
//
// usage: node verify.cjs BUNDLE PUBLIC_KEY.pem [FILE]
// On success prints {"keyid", "payloadType", "statement"} as JSON and exits 0. With FILE, the
// statement must also name FILE's sha256 among its subjects (cosign's claim check). Any failure
// is one line on stderr and exit 1.
'use strict';
const crypto = require('crypto');
const fs = require('fs');
const { bundleFromJSON } = require('@sigstore/bundle');
const { Verifier, toSignedEntity, toTrustMaterial } = require('@sigstore/verify');

function main([bundlePath, keyPath, filePath]) {
  const bundle = bundleFromJSON(JSON.parse(fs.readFileSync(bundlePath, 'utf8')));
  const der = crypto.createPublicKey(fs.readFileSync(keyPath)).export({ type: 'spki', format: 'der' });
  // The key is found by the bundle's hint: sha256 of the DER SubjectPublicKeyInfo, hex.
  const hint = crypto.createHash('sha256').update(der).digest('hex');
  const root = { certificateAuthorities: [], timestampAuthorities: [], tlogs: [], ctlogs: [] };
  const trust = toTrustMaterial(root, { [hint]: { rawBytes: der } });
  const verifier = new Verifier(trust, { tlogThreshold: 0, ctlogThreshold: 0, timestampThreshold: 0 });
  verifier.verify(toSignedEntity(bundle));
  if (bundle.content.$case !== 'dsseEnvelope') throw new Error('not a DSSE bundle');
  const envelope = bundle.content.dsseEnvelope;
  if (envelope.payloadType !== 'application/vnd.in-toto+json') {
    throw new Error(`payload type ${envelope.payloadType}`);
  }
  const statement = JSON.parse(envelope.payload.toString('utf8'));
  if (filePath) {
    const sha = crypto.createHash('sha256').update(fs.readFileSync(filePath)).digest('hex');
    if (!statement.subject.some((s) => s.digest && s.digest.sha256 === sha)) {
      throw new Error(`no subject has the sha256 of ${filePath} (${sha})`);
    }
  }
  const keyid = envelope.signatures[0].keyid;
  process.stdout.write(JSON.stringify({ keyid, payloadType: envelope.payloadType, statement }) + '\n');
}

try {
  if (process.argv.length < 4) {
    process.stderr.write('usage: node verify.cjs BUNDLE PUBLIC_KEY.pem [FILE]\n');
    process.exit(2);
  }
  main(process.argv.slice(2));
} catch (error) {
  process.stderr.write(`FAILED: ${error.code ? error.code + ': ' : ''}${error.message}\n`);
  process.exit(1);
}
