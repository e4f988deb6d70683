package requests

// Encode is r's record as the store keeps it.
var Encode = encode
