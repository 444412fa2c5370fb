{
 "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
 "verificationMaterial": {
  "publicKey": {
   "hint": "0000000000000000000000000000000000000000000000000000000000000000"
  },
  "tlogEntries": []
 },
 "dsseEnvelope": {
  "payload": "eyJfdHlwZSI6ICJodHRwczovL2luLXRvdG8uaW8vU3RhdGVtZW50L3YxIiwgInN1YmplY3QiOiBbeyJuYW1lIjogIm1vZGVsIiwgImRpZ2VzdCI6IHsic2hhMjU2IjogImM3NGYzMDA4ZmRkMmY3YzVhZTU0NDZhYjJlNTIyNjI5ZjYzMzQ2ZjY4YTQwMjZiNGY3MmI5MWIzOTM0NzVmZjYifX1dLCAicHJlZGljYXRlVHlwZSI6ICJodHRwczovL21vZGVsX3NpZ25pbmcvc2lnbmF0dXJlL3YxLjAiLCAicHJlZGljYXRlIjogeyJzZXJpYWxpemF0aW9uIjogeyJtZXRob2QiOiAiZmlsZXMiLCAiaGFzaF90eXBlIjogInNoYTI1NiIsICJhbGxvd19zeW1saW5rcyI6IGZhbHNlLCAiaWdub3JlX3BhdGhzIjogWyIuZ2l0IiwgIm1vZGVsLnNpZyJdfSwgInJlc291cmNlcyI6IFt7Im5hbWUiOiAiY29uZmlnLmpzb24iLCAiYWxnb3JpdGhtIjogInNoYTI1NiIsICJkaWdlc3QiOiAiNDQxMzZmYTM1NWIzNjc4YTExNDZhZDE2ZjdlODY0OWU5NGZiNGZjMjFmZTc3ZTgzMTBjMDYwZjYxY2FhZmY4YSJ9XX19",
  "payloadType": "application/vnd.in-toto+json",
  "signatures": [
   {
    "sig": "MAYCAQECAQE=",
    "keyid": ""
   }
  ]
 }
}